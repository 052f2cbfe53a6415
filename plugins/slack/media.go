package main

import (
	"encoding/json"
	"mime"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// This file holds buttons (Block Kit), files sent (Slack's external upload flow) and files
// fetched (url_private with the bot token).

// Block Kit limits: a section's text, a button's label, the elements of one actions block.
const (
	maxSectionText = 3000
	maxButtonLabel = 75
	maxActions     = 25
)

// block is a Block Kit block: a section (Text) or an actions block (Elements).
type block struct {
	Type     string    `json:"type"`
	Text     *textObj  `json:"text,omitempty"`
	Elements []element `json:"elements,omitempty"`
}

type textObj struct {
	Type string `json:"type"` // mrkdwn or plain_text
	Text string `json:"text"`
}

// element is a button of an actions block.
type element struct {
	Type     string  `json:"type"` // button
	Text     textObj `json:"text"`
	ActionID string  `json:"action_id"`
	Value    string  `json:"value"`
	Style    string  `json:"style,omitempty"`
}

// buttonBlocks is text as section blocks (at most 3,000 characters each, escaped as a message's
// text is) and the buttons as actions blocks (at most 25 buttons each). A press comes back with
// the button's ID as its value and action_id.
func buttonBlocks(text string, buttons []abi.Button) []block {
	var out []block
	if strings.TrimSpace(text) != "" {
		for _, part := range splitEscaped(text, maxSectionText) {
			out = append(out, block{Type: "section", Text: &textObj{Type: "mrkdwn", Text: part}})
		}
	}
	for i := 0; i < len(buttons); i += maxActions {
		b := block{Type: "actions"}
		for _, btn := range buttons[i:min(i+maxActions, len(buttons))] {
			label := btn.Label
			if strings.TrimSpace(label) == "" {
				label = btn.ID
			}
			if utf8.RuneCountInString(label) > maxButtonLabel {
				label = string([]rune(label)[:maxButtonLabel-1]) + "…"
			}
			e := element{Type: "button", Text: textObj{Type: "plain_text", Text: label}, ActionID: btn.ID, Value: btn.ID}
			if btn.Style == abi.ButtonPrimary || btn.Style == abi.ButtonDanger {
				e.Style = btn.Style
			}
			b.Elements = append(b.Elements, e)
		}
		out = append(out, b)
	}
	return out
}

// sendFile shares one file (msg.Attachments, with its caption in Text) with Slack's upload
// flow: files.getUploadURLExternal (filename, length), the bytes POSTed to the upload_url it
// answers, then files.completeUploadExternal, which shares the file into the channel (and
// thread) with the caption as its initial_comment. Until completeUploadExternal is sent nothing
// is in the chat, so any failure before it is retryable (a refusal naming the request, such as
// missing_scope, permanent); completeUploadExternal's failures are mapped as chat.postMessage's
// (postFailure): a 5xx, a reset or no answer after it was sent is uncertain, never resent.
func sendFile(c *sdk.Context, a *api, token string, msg *abi.OutboundMessage) *abi.SendResult {
	switch {
	case len(msg.Attachments) > 1:
		return failed(abi.SendPermanent, "too_many_attachments", "one file per message; not sent")
	case len(msg.Buttons) > 0:
		return failed(abi.SendPermanent, "buttons_with_attachment", "Slack cannot show buttons under a shared file; not sent")
	case len(msg.Attachments[0].Data) == 0:
		return failed(abi.SendPermanent, "no_data", "the attachment carries no bytes; not sent")
	}
	att := msg.Attachments[0]
	name := fileName(att)
	r, err := a.callForm("files.getUploadURLExternal", token, url.Values{
		"filename": {name}, "length": {strconv.Itoa(len(att.Data))},
	})
	if res := beforeShare("files.getUploadURLExternal", r, err, token); res != nil {
		return res
	}
	var up struct {
		UploadURL string `json:"upload_url"`
		FileID    string `json:"file_id"`
	}
	if json.Unmarshal(r.Body, &up) != nil || up.UploadURL == "" || up.FileID == "" {
		return failed(abi.SendRetryable, "unreadable_answer", "files.getUploadURLExternal answered without upload_url or file_id; nothing shared")
	}
	ct := att.MIMEType
	if ct == "" {
		ct = "application/octet-stream"
	}
	// The upload URL is signed for this file: it needs no token, and gets none.
	resp, err := c.HTTP(&abi.HTTPRequest{Method: "POST", URL: up.UploadURL, Headers: map[string][]string{"Content-Type": {ct}},
		Body: att.Data, TimeoutMs: max(time.Until(a.deadline), time.Millisecond).Milliseconds(), MaxBytes: 64 << 10})
	if err != nil {
		e := abi.AsError(err)
		if e.Code == abi.CodeDenied || e.Code == abi.CodeBadRequest || e.Code == abi.CodeTooLarge {
			return failed(abi.SendPermanent, e.Code, "upload: "+e.Message)
		}
		return failed(abi.SendRetryable, e.Code, "upload: "+e.Message+"; nothing shared")
	}
	if resp.Status != 200 {
		up := &reply{Status: resp.Status}
		if v, ok := header(resp.Headers, "Retry-After"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
				up.RetryAfter = max(time.Duration(n)*time.Second, time.Second)
			}
		}
		if resp.Status == 429 {
			return rateLimited(up, "upload: HTTP 429")
		}
		return notRun(up, "upload_failed", "upload: HTTP "+strconv.Itoa(resp.Status)+"; nothing shared")
	}
	files, _ := json.Marshal([]map[string]string{{"id": up.FileID, "title": name}})
	params := url.Values{"files": {string(files)}, "channel_id": {msg.ChatID}}
	if msg.ThreadID != "" {
		params.Set("thread_ts", msg.ThreadID)
	}
	if strings.TrimSpace(msg.Text) != "" {
		params.Set("initial_comment", escape(msg.Text))
	}
	r, err = a.callForm("files.completeUploadExternal", token, params)
	if res := postFailure("files.completeUploadExternal", r, err, token); res != nil {
		return res
	}
	return &abi.SendResult{MessageIDs: []string{sharedID(r.Body, msg.ChatID, up.FileID)}}
}

// beforeShare maps a failure of a request made before files.completeUploadExternal: nothing is
// in the chat yet, so anything but a refusal of the request itself is retryable.
func beforeShare(method string, r *reply, err error, token string) *abi.SendResult {
	if err != nil && abi.CodeOf(err) == abi.CodeTooLarge {
		return failed(abi.SendPermanent, abi.CodeTooLarge, method+": "+abi.AsError(err).Message)
	}
	res := idempotentFailure(method, r, err, token)
	if res != nil && res.Error.Kind == abi.SendRetryable {
		res.Error.Message += "; nothing shared"
	}
	return res
}

// sharedID is the id of the message a file was shared in: the ts of its share in channel, when
// completeUploadExternal's answer has it (Slack shares asynchronously, and often answers
// without), else the file id.
func sharedID(body []byte, channel, fileID string) string {
	type share struct {
		TS string `json:"ts"`
	}
	var ans struct {
		Files []struct {
			ID     string `json:"id"`
			Shares struct {
				Public  map[string][]share `json:"public"`
				Private map[string][]share `json:"private"`
			} `json:"shares"`
		} `json:"files"`
	}
	if json.Unmarshal(body, &ans) != nil {
		return fileID
	}
	for _, f := range ans.Files {
		for _, m := range []map[string][]share{f.Shares.Public, f.Shares.Private} {
			if s := m[channel]; len(s) > 0 && s[0].TS != "" {
				return s[0].TS
			}
		}
	}
	return fileID
}

// fileName is the name a file is uploaded under: the attachment's, else "file" with an
// extension for its type.
func fileName(att abi.Attachment) string {
	if n := strings.TrimSpace(att.Name); n != "" {
		return n
	}
	if exts, _ := mime.ExtensionsByType(att.MIMEType); len(exts) > 0 {
		return "file" + exts[0]
	}
	return "file"
}

// fetch returns a file's bytes: a GET of its url_private(_download) (the attachment's Ref)
// with the bot token of its workspace, through the egress scope that gives files.slack.com to
// fetch alone. It stops past MaxBytes (too_large). The token goes only to files.slack.com (or
// the api_base host, for a fake): a Ref elsewhere is refused without a request. Without access,
// Slack redirects to the workspace's sign-in page: an HTML answer for a file that is not HTML is
// that page, an error, not the file.
func fetch(c *sdk.Context, req *abi.FetchRequest) (*abi.FetchResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	att := req.Attachment
	u, err := url.Parse(att.Ref)
	if err != nil || att.Ref == "" || !mayReceiveToken(cfg, u) {
		return nil, abi.Errorf(abi.CodeBadRequest, "fetch: the reference is not a Slack file URL (files.slack.com)")
	}
	if req.MaxBytes <= 0 {
		return nil, abi.Errorf(abi.CodeBadRequest, "fetch: max_bytes must be positive")
	}
	if att.Size > req.MaxBytes {
		return nil, abi.Errorf(abi.CodeTooLarge, "fetch: the file has %d bytes; the limit is %d", att.Size, req.MaxBytes)
	}
	token := cfg.tokenFor(fileTeam(u.Path))
	resp, err := c.HTTP(&abi.HTTPRequest{Method: "GET", URL: u.String(),
		Headers: map[string][]string{"Authorization": {"Bearer " + token}}, MaxBytes: req.MaxBytes})
	if err != nil {
		e := *abi.AsError(err)
		e.Message = scrub(e.Message, token)
		switch e.Code {
		case abi.CodeTooLarge:
			e.Message = "fetch: the file exceeds " + strconv.FormatInt(req.MaxBytes, 10) + " bytes: " + e.Message
		case abi.CodeDenied:
			// Slack redirects a token without access to the sign-in page, which the egress
			// scope does not reach.
			e.Message = "fetch: " + e.Message + " (Slack redirects to its sign-in page when the token cannot read the file)"
		case abi.CodeUncertain:
			e.Code = abi.CodeIO // a GET changes nothing
		}
		return nil, &e
	}
	mt := mediaType(resp.Headers)
	switch {
	case resp.Status == 404 || resp.Status == 410:
		return nil, abi.Errorf(abi.CodeNotFound, "fetch: Slack no longer has the file (HTTP %d)", resp.Status)
	case resp.Status == 401 || resp.Status == 403:
		return nil, abi.Errorf(abi.CodeDenied, "fetch: Slack refused the bot token for the file (HTTP %d); it needs files:read", resp.Status)
	case resp.Status != 200:
		return nil, abi.Errorf(abi.CodeIO, "fetch: Slack answered HTTP %d", resp.Status)
	case mt == "text/html" && !strings.EqualFold(att.MIMEType, "text/html"):
		return nil, abi.Errorf(abi.CodeDenied, "fetch: Slack answered a sign-in page, not the file: the token cannot read it (files:read, or another workspace's file)")
	}
	if mt == "" || mt == "application/octet-stream" {
		mt = att.MIMEType
	}
	return &abi.FetchResult{Data: resp.Body, MIMEType: mt}, nil
}

// mayReceiveToken reports whether u may be sent the bot token: https on files.slack.com, or the
// scheme and host of api_base (a fake or a proxy standing in for Slack).
func mayReceiveToken(cfg *Config, u *url.URL) bool {
	if u.Scheme == "https" && strings.EqualFold(u.Hostname(), "files.slack.com") && (u.Port() == "" || u.Port() == "443") {
		return true
	}
	base, err := url.Parse(cfg.APIBase)
	return err == nil && base.Host != "" && u.Scheme == base.Scheme && strings.EqualFold(u.Host, base.Host)
}

// fileTeam is the team id in a url_private path (/files-pri/T0123-F0456/name): the workspace
// whose token reads the file ("" if the path does not say).
func fileTeam(path string) string {
	rest, ok := strings.CutPrefix(path, "/files-pri/")
	if !ok {
		return ""
	}
	seg, _, _ := strings.Cut(rest, "/")
	team, _, ok := strings.Cut(seg, "-")
	if !ok || !strings.HasPrefix(team, "T") && !strings.HasPrefix(team, "E") {
		return ""
	}
	return team
}

// mediaType is the answer's Content-Type without parameters, lower case.
func mediaType(h map[string][]string) string {
	ct, _ := header(h, "Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}
