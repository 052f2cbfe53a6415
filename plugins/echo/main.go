// Command echo is the reference platform plugin: a minimal "chat platform" that lives on
// loopback. It receives messages by webhook (POST /hooks/echo/{profile}) or by polling an inbox
// URL, and sends by POSTing to an outbox URL. Tests use it, with the fake in
// conformance/echotest, to drive the whole host end to end; plugin authors can read it as the
// smallest complete example of the SDK.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o echo.wasm .
package main

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Config is a profile's configuration.
type Config struct {
	OutboxURL string `json:"outbox_url"`       // where send POSTs messages
	InboxURL  string `json:"inbox_url"`        // where poll fetches messages (optional)
	Secret    string `json:"secret,omitempty"` // required X-Echo-Secret on webhooks, and sent with outbox posts, when set
}

// Message is the wire shape of the echo platform, in both directions.
type Message struct {
	ID         string `json:"id,omitempty"`
	ChatType   string `json:"chat_type,omitempty"`
	ChatID     string `json:"chat_id"`
	ThreadID   string `json:"thread_id,omitempty"`
	UserID     string `json:"user_id,omitempty"`
	UserName   string `json:"user_name,omitempty"`
	Text       string `json:"text"`
	Mentioned  bool   `json:"mentioned,omitempty"`
	ReplyTo    string `json:"reply_to,omitempty"`
	Part       int    `json:"part,omitempty"`
	Parts      int    `json:"parts,omitempty"`
	DeliveryID string `json:"delivery_id,omitempty"`
	Kind       string `json:"kind,omitempty"` // "observe", "redact" or "" (message)
	// Attachments are the message's files; each one's bytes are a data: URL, which fetch
	// decodes (inbound) and send writes (outbound).
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Attachment is a file on the echo platform's wire.
type Attachment struct {
	Kind     string `json:"kind"` // abi.Attach*
	Name     string `json:"name,omitempty"`
	MIMEType string `json:"mime_type,omitempty"` // what the sender claims: the host sniffs
	Size     int64  `json:"size,omitempty"`      // what the sender claims, 0 if unknown
	URL      string `json:"url"`                 // data:[<mime>][;base64],<bytes>
	Caption  string `json:"caption,omitempty"`
}

const schema = `{"type":"object","properties":{
 "outbox_url":{"type":"string"},"inbox_url":{"type":"string"},"secret":{"type":"string","secret":true}},
 "required":["outbox_url"]}`

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name:         "echo",
			Version:      "1.0.0",
			Kind:         abi.KindPlatform,
			Platform:     "echo",
			Description:  "loopback reference platform",
			Capabilities: []string{abi.CapWebhook, abi.CapPoll, abi.CapThreads, abi.CapReplies, abi.CapAttachments},
			MessageLimit: abi.MessageLimit{Max: 2000, Unit: abi.UnitCodePoint},
			// Replies are posted only from send; poll only reads the inbox.
			EgressScopes: []abi.EgressScope{
				{Name: "post", Host: "127.0.0.1", Exports: []string{abi.ExportSend}, Methods: []string{"POST"}},
				{Name: "post", Host: "localhost", Exports: []string{abi.ExportSend}, Methods: []string{"POST"}},
				{Name: "inbox", Host: "127.0.0.1", Exports: []string{abi.ExportPoll}, Methods: []string{"GET"}},
				{Name: "inbox", Host: "localhost", Exports: []string{abi.ExportPoll}, Methods: []string{"GET"}},
			},
			ConfigSchema: json.RawMessage(schema),
		},
		Configure: configure,
		Webhook:   webhook,
		Poll:      poll,
		Send:      send,
		Fetch:     fetch,
	})
}

func main() {}

func configure(c *sdk.Context) ([]string, error) {
	var cfg Config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	var problems []string
	for name, u := range map[string]string{"outbox_url": cfg.OutboxURL, "inbox_url": cfg.InboxURL} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			problems = append(problems, fmt.Sprintf("%s: %q is not an http(s) URL", name, u))
		}
	}
	if cfg.OutboxURL == "" {
		problems = append(problems, "outbox_url is required")
	}
	return problems, nil
}

func webhook(c *sdk.Context, req *abi.WebhookRequest) (*abi.WebhookResult, error) {
	var cfg Config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	if req.Method != "POST" {
		return refuse(405, "method not allowed"), nil
	}
	if cfg.Secret != "" {
		got := first(req.Headers, "X-Echo-Secret")
		if subtle.ConstantTimeCompare([]byte(got), []byte(cfg.Secret)) != 1 {
			return refuse(401, "bad secret"), nil
		}
	}
	var m Message
	if err := json.Unmarshal(req.Body, &m); err != nil {
		return refuse(400, "malformed message: "+err.Error()), nil
	}
	if m.ChatID == "" {
		return refuse(400, "chat_id is required"), nil
	}
	return &abi.WebhookResult{Response: *answer(200, "ok"), Events: []abi.InboundEvent{event(m)}}, nil
}

func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	var cfg Config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	if cfg.InboxURL == "" {
		return &abi.PollResult{BackoffMs: 60_000}, nil
	}
	// The cursor of the batch returned by the previous poll is committed now: the host calls
	// poll again only after it has durably recorded that batch. A crash in between makes the
	// host see the batch twice, and it deduplicates by event id; nothing is lost.
	const cursorKey, nextKey = "inbox_cursor", "inbox_cursor_next"
	if next, found, err := c.KVGet(nextKey); err != nil {
		return nil, err
	} else if found {
		if err := c.KVSet(cursorKey, next); err != nil {
			return nil, err
		}
		if err := c.KVDelete(nextKey); err != nil {
			return nil, err
		}
	}
	cursor, _, err := c.KVGet(cursorKey)
	if err != nil {
		return nil, err
	}
	u := cfg.InboxURL + "?after=" + url.QueryEscape(string(cursor)) + "&wait_ms=" + strconv.FormatInt(req.WaitMs, 10)
	resp, err := c.HTTP(&abi.HTTPRequest{Method: "GET", URL: u, TimeoutMs: req.WaitMs + 5000})
	if err != nil {
		return nil, err
	}
	if resp.Status != 200 {
		return &abi.PollResult{BackoffMs: 1000}, nil
	}
	var batch struct {
		Messages []Message `json:"messages"`
		Cursor   string    `json:"cursor"`
	}
	if err := json.Unmarshal(resp.Body, &batch); err != nil {
		c.Log(abi.LevelWarn, "inbox answered malformed JSON", "error", err.Error())
		return &abi.PollResult{BackoffMs: 1000}, nil
	}
	out := &abi.PollResult{}
	for _, m := range batch.Messages {
		if m.ChatID == "" {
			c.Log(abi.LevelWarn, "skipping inbox message without chat_id", "id", m.ID)
			continue
		}
		out.Events = append(out.Events, event(m))
	}
	// Preferred path: record each event with the host first (durable, deduplicated), then move
	// the cursor; a crash in between replays the batch and the host ignores the repeats.
	dispatched := false
	for i, ev := range out.Events {
		if _, err := c.Dispatch(ev); err != nil {
			if i == 0 && abi.CodeOf(err) == abi.CodeUnavailable {
				break // a host without dispatch: return the events instead
			}
			return nil, err
		}
		dispatched = true
	}
	if dispatched {
		out.Events = nil
		if batch.Cursor != "" {
			if err := c.KVSet(cursorKey, []byte(batch.Cursor)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if batch.Cursor != "" && batch.Cursor != string(cursor) {
		if err := c.KVSet(nextKey, []byte(batch.Cursor)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	var cfg Config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	var atts []Attachment
	for _, a := range msg.Attachments {
		atts = append(atts, Attachment{Kind: a.Kind, Name: a.Name, MIMEType: a.MIMEType, Size: int64(len(a.Data)), Caption: a.Caption,
			URL: "data:" + a.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(a.Data)})
	}
	body, _ := json.Marshal(Message{
		ChatType: msg.ChatType, ChatID: msg.ChatID, ThreadID: msg.ThreadID, UserID: msg.UserID,
		Text: msg.Text, ReplyTo: msg.ReplyTo, Part: msg.Part, Parts: msg.Parts, DeliveryID: msg.DeliveryID,
		Attachments: atts,
	})
	headers := map[string][]string{"Content-Type": {"application/json"}}
	if cfg.Secret != "" {
		headers["X-Echo-Secret"] = []string{cfg.Secret} // the platform knows the plugin by it
	}
	resp, err := c.HTTP(&abi.HTTPRequest{Method: "POST", URL: cfg.OutboxURL, Headers: headers, Body: body})
	if err != nil {
		kind := abi.SendRetryable
		if abi.CodeOf(err) == abi.CodeUncertain {
			kind = abi.SendUncertain // sent, answer lost: may have been accepted
		}
		return &abi.SendResult{Error: &abi.SendError{Kind: kind, Code: abi.CodeOf(err), Message: err.Error()}}, nil
	}
	var r struct {
		OK         bool   `json:"ok"`
		MessageID  string `json:"message_id"`
		Error      string `json:"error"`
		RetryAfter int64  `json:"retry_after"` // seconds
	}
	_ = json.Unmarshal(resp.Body, &r)
	switch {
	case resp.Status == 200 && r.OK:
		return &abi.SendResult{MessageIDs: []string{r.MessageID}}, nil
	case resp.Status == 429:
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "rate_limited",
			Message: "outbox rate limited", RetryAfterMs: r.RetryAfter * 1000}}, nil
	case resp.Status >= 500:
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "server_error",
			Message: fmt.Sprintf("outbox answered %d", resp.Status)}}, nil
	default:
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: r.Error,
			Message: fmt.Sprintf("outbox refused the message (%d %s)", resp.Status, r.Error)}}, nil
	}
}

// fetch decodes an attachment's data: URL, refusing more than the host's limit.
func fetch(c *sdk.Context, req *abi.FetchRequest) (*abi.FetchResult, error) {
	mime, data, err := decodeDataURL(req.Attachment.Ref)
	if err != nil {
		return nil, abi.Errorf(abi.CodeNotFound, "%v", err)
	}
	if req.MaxBytes > 0 && int64(len(data)) > req.MaxBytes {
		return nil, abi.Errorf(abi.CodeTooLarge, "the file has %d bytes; the limit is %d", len(data), req.MaxBytes)
	}
	return &abi.FetchResult{Data: data, MIMEType: mime}, nil
}

// decodeDataURL decodes "data:[<mime>][;base64],<data>" (RFC 2397).
func decodeDataURL(u string) (string, []byte, error) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", nil, fmt.Errorf("not a data: URL")
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return "", nil, fmt.Errorf("malformed data: URL")
	}
	mime, b64 := strings.CutSuffix(meta, ";base64")
	if !b64 {
		s, err := url.PathUnescape(payload)
		return mime, []byte(s), err
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return "", nil, fmt.Errorf("malformed base64 in data: URL: %v", err)
	}
	return mime, data, nil
}

func event(m Message) abi.InboundEvent {
	chatType := m.ChatType
	if chatType == "" {
		chatType = abi.ChatDM
	}
	var atts []abi.Attachment
	for _, a := range m.Attachments {
		atts = append(atts, abi.Attachment{Kind: a.Kind, Name: a.Name, MIMEType: a.MIMEType, Size: a.Size, Ref: a.URL, Caption: a.Caption})
	}
	return abi.InboundEvent{
		Attachments: atts,
		ID:          m.ID,
		Kind:        m.Kind,
		Source: abi.Source{
			ChatType: chatType, ChatID: m.ChatID, ThreadID: m.ThreadID,
			UserID: m.UserID, UserName: m.UserName, MessageID: m.ID,
		},
		Text:      m.Text,
		ReplyTo:   m.ReplyTo,
		Mentioned: m.Mentioned,
	}
}

func answer(status int, text string) *abi.HTTPResponse {
	return &abi.HTTPResponse{Status: status, Headers: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte(text)}
}

// refuse answers a webhook that fails verification or parsing: a successful call with no events.
func refuse(status int, text string) *abi.WebhookResult {
	return &abi.WebhookResult{Response: *answer(status, text)}
}

func first(h map[string][]string, name string) string {
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0]
		}
	}
	return ""
}
