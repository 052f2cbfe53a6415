//go:build !wasip1

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	st "github.com/hermes-host/hermes-host/conformance/slacktest"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
)

// pngBytes is the start of a PNG file and some more: what the bytes are does not matter to
// the plugin, only that they come back whole.
var pngBytes = append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte("pixels"), 500)...)

// A file shared in a channel becomes the event's attachment, whose bytes fetch reads with the
// bot token; a voice clip is a voice note; past max_bytes fetch fails too_large; a token of
// another workspace ends on Slack's sign-in page, which is an error, not the file.
func TestFileShareAndFetch(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		two := s.AddTeam("T0SECOND", "Second", "xoxb-2-second-workspace")
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s),
			"other": profile(s, "bot_token", two.BotToken)}})
		fw := hook(t, s, h, "main")
		team := s.Team()
		pic := team.ShareFile(general, ann, team.MentionText("what is this?"), st.FileSpec{Name: "cat.png", Mimetype: "image/png", Data: pngBytes})
		clip := team.ShareFile(team.AddDM(ann), ann, "", st.FileSpec{Name: "audio_message.m4a", Mimetype: "audio/mp4",
			Subtype: "slack_audio", Data: []byte("voice bytes")})
		if err := s.WaitAcked(wait, append(pic.EventIDs, clip.EventIDs...)...); err != nil {
			t.Fatal(err)
		}
		files := s.Files()
		ev := byIDNow(fw, "msg:"+team.ID+":"+general+":"+pic.TS)
		if ev == nil || len(ev.Attachments) != 1 || ev.Text != "what is this?" || !ev.Mentioned || ev.Source.ThreadID != pic.TS {
			t.Fatalf("picture: %+v (events %+v)", ev, fw.got())
		}
		att := ev.Attachments[0]
		want := abi.Attachment{Kind: abi.AttachImage, MIMEType: "image/png", Name: "cat.png", Size: int64(len(pngBytes)),
			Ref: s.URL() + "/files-pri/" + team.ID + "-" + files[0].ID + "/download/cat.png"}
		if att.Kind != want.Kind || att.MIMEType != want.MIMEType || att.Name != want.Name || att.Size != want.Size || att.Ref != want.Ref {
			t.Fatalf("attachment\n got %+v\nwant %+v", att, want)
		}
		voice := byIDNow(fw, "msg:"+team.ID+":"+team.AddDM(ann)+":"+clip.TS)
		if voice == nil || len(voice.Attachments) != 1 || voice.Attachments[0].Kind != abi.AttachVoice || voice.Text != "" {
			t.Fatalf("voice clip: %+v", voice)
		}

		res, err := h.Fetch("main", att, 1<<20)
		if err != nil || !bytes.Equal(res.Data, pngBytes) || res.MIMEType != "image/png" {
			t.Fatalf("fetch: %v %+v", err, res)
		}
		d := s.Downloads()
		if len(d) != 1 || d[0].Token != st.DefaultBotToken || d[0].Status != 200 || d[0].FileID != files[0].ID {
			t.Fatalf("downloads %+v", d)
		}
		// Past max_bytes: refused from the size Slack gave, without a request; and, the size
		// unknown, the download stops past the limit.
		if _, err := h.Fetch("main", att, 100); abi.CodeOf(err) != abi.CodeTooLarge {
			t.Fatalf("over max_bytes (size known): %v", err)
		}
		if n := len(s.Downloads()); n != 1 {
			t.Fatalf("%d downloads, want no new one", n)
		}
		unsized := att
		unsized.Size = 0
		if _, err := h.Fetch("main", unsized, 100); abi.CodeOf(err) != abi.CodeTooLarge {
			t.Fatalf("over max_bytes (size unknown): %v", err)
		}
		if n := len(s.Downloads()); n != 2 {
			t.Fatalf("%d downloads, want 2", n)
		}
		// Another workspace's token: Slack sends it to the sign-in page.
		_, err = h.Fetch("other", att, 1<<20)
		if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "sign-in") || strings.Contains(err.Error(), two.BotToken) {
			t.Fatalf("another workspace's token: %v", err)
		}
		if d := s.Downloads(); d[len(d)-1].Status != 302 || d[len(d)-1].Token != two.BotToken {
			t.Fatalf("downloads %+v", d)
		}
		// The token goes to Slack's file host (or the fake standing in for it) only.
		for _, ref := range []string{"https://example.com/files-pri/T0HERMES01-F1/x.png", "http://files.slack.com/files-pri/T1-F1/x", ""} {
			bad := att
			bad.Ref = ref
			if _, err := h.Fetch("main", bad, 1<<20); abi.CodeOf(err) != abi.CodeBadRequest {
				t.Errorf("ref %q: %v", ref, err)
			}
		}
	})
}

func document(text, thread string) abi.OutboundMessage {
	return abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, ThreadID: thread, Text: text,
		Attachments: []abi.Attachment{{Kind: abi.AttachDocument, MIMEType: "application/pdf", Name: "report.pdf", Data: []byte("%PDF-1.7 the report")}}}
}

// A file the agent sends goes through Slack's three steps, with its bytes, into the thread with
// the caption; the message id is the share's ts.
func TestSendFile(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s)}})
		team := s.Team()
		root := team.Say(general, ann, "send me the report")
		res, err := h.Send("main", document("here it is & more", root.TS))
		if err != nil || res.Error != nil || len(res.MessageIDs) != 1 {
			t.Fatalf("send: %+v %v", res, err)
		}
		up := s.Uploads()
		if len(up) != 1 {
			t.Fatalf("uploads %+v", up)
		}
		f := up[0]
		if string(f.Data) != "%PDF-1.7 the report" || f.Length != len(f.Data) || f.Name != "report.pdf" || !f.Completed ||
			f.Channel != general || f.ThreadTS != root.TS || f.InitialComment != "here it is &amp; more" || f.Uploader != st.DefaultBotToken {
			t.Fatalf("upload %+v", f)
		}
		if res.MessageIDs[0] != f.ShareTS {
			t.Fatalf("message id %q, want the share's ts %q", res.MessageIDs[0], f.ShareTS)
		}
		var order []string
		for _, r := range s.Requests("") {
			if r.Method != "auth.test" { // configure's, at load (Wasm)
				order = append(order, r.Method)
			}
		}
		if got := strings.Join(order, ","); got != "files.getUploadURLExternal,upload,files.completeUploadExternal" {
			t.Fatalf("requests %s", got)
		}
		if p := s.Posted(team.ID, general, root.TS); len(p) != 1 || len(p[0].Files) != 1 || p[0].Text != f.InitialComment {
			t.Fatalf("thread holds %+v", p)
		}
		// Refused before anything is sent.
		for _, c := range []struct {
			msg  abi.OutboundMessage
			code string
		}{
			{func() abi.OutboundMessage {
				m := document("", "")
				m.Attachments = append(m.Attachments, m.Attachments[0])
				return m
			}(), "too_many_attachments"},
			{func() abi.OutboundMessage { m := document("", ""); m.Attachments[0].Data = nil; return m }(), "no_data"},
			{func() abi.OutboundMessage {
				m := document("", "")
				m.Buttons = []abi.Button{{ID: "x", Label: "x"}}
				return m
			}(), "buttons_with_attachment"},
		} {
			res, err := h.Send("main", c.msg)
			if err != nil || res.Error == nil || res.Error.Kind != abi.SendPermanent || res.Error.Code != c.code {
				t.Errorf("%s: %+v %v", c.code, res, err)
			}
		}
		if n := len(s.Uploads()); n != 1 {
			t.Fatalf("%d uploads after refusals", n)
		}
	})
}

// Slack shares a file after answering: the message id is then the file's id.
func TestSendFileAsyncShare(t *testing.T) {
	s := st.New(t, st.WithAsyncShares())
	s.Team().AddChannel(general, "general")
	h := newHost(t, "native", sdktest.Options{Profiles: map[string]any{"main": profile(s)}})
	res, err := h.Send("main", document("", ""))
	if err != nil || res.Error != nil || len(res.MessageIDs) != 1 || res.MessageIDs[0] != s.Uploads()[0].ID {
		t.Fatalf("send: %+v %v (uploads %+v)", res, err, s.Uploads())
	}
}

// Before files.completeUploadExternal nothing is in the chat: any failure is retryable. Once it
// was sent, an answer lost or garbled is uncertain, never resent.
func TestSendFileFaults(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s)}})
		for _, c := range []struct {
			name, method string
			fault        *st.Fault
			msg          abi.OutboundMessage
			kind, code   string
			completes    int  // completeUploadExternal requests wanted
			shared       bool // the file is in the chat
		}{
			{"getUploadURL 503", "files.getUploadURLExternal", ptr(st.ServerError(503)), document("x", ""), abi.SendRetryable, "server_error", 0, false},
			{"getUploadURL reset", "files.getUploadURLExternal", ptr(st.ConnectionReset()), document("x", ""), abi.SendRetryable, "", 0, false},
			{"getUploadURL ratelimited", "files.getUploadURLExternal", ptr(st.RateLimited(3)), document("x", ""), abi.SendRetryable, "rate_limited", 0, false},
			{"getUploadURL missing_scope", "files.getUploadURLExternal", ptr(st.Error("missing_scope")), document("x", ""), abi.SendPermanent, "missing_scope", 0, false},
			{"upload 500", "upload", ptr(st.ServerError(500)), document("x", ""), abi.SendRetryable, "upload_failed", 0, false},
			{"upload reset", "upload", ptr(st.ConnectionReset()), document("x", ""), abi.SendRetryable, "", 0, false},
			{"upload taken, then reset", "upload", ptr(st.AfterEffect(st.ConnectionReset())), document("x", ""), abi.SendRetryable, "", 0, false},
			{"complete: channel_not_found", "", nil, func() abi.OutboundMessage { m := document("x", ""); m.ChatID = "C0NOPE"; return m }(),
				abi.SendPermanent, "channel_not_found", 1, false},
			{"complete: ratelimited", "files.completeUploadExternal", ptr(st.RateLimited(2)), document("x", ""), abi.SendRetryable, "rate_limited", 1, false},
			{"complete: 503 service_unavailable", "files.completeUploadExternal", ptr(st.Error("service_unavailable").WithStatus(503)), document("x", ""),
				abi.SendRetryable, "service_unavailable", 1, false},
			{"shared, then 502", "files.completeUploadExternal", ptr(st.AfterEffect(st.ServerError(502))), document("x", ""), abi.SendUncertain, "server_error", 1, true},
			{"shared, then reset", "files.completeUploadExternal", ptr(st.AfterEffect(st.ConnectionReset())), document("x", ""), abi.SendUncertain, "uncertain", 1, true},
			{"shared, then internal_error", "files.completeUploadExternal", ptr(st.AfterEffect(st.Error("internal_error"))), document("x", ""), abi.SendUncertain, "internal_error", 1, true},
		} {
			if c.fault != nil {
				s.InjectFault(c.method, *c.fault)
			}
			before := len(s.Requests("files.completeUploadExternal"))
			sharedBefore := len(s.AllPosted())
			res, err := h.Send("main", c.msg)
			if err != nil || res.Error == nil {
				t.Errorf("%s: %+v %v", c.name, res, err)
				continue
			}
			if e := res.Error; e.Kind != c.kind || (c.code != "" && e.Code != c.code) {
				t.Errorf("%s: %s/%s (%s), want %s/%s", c.name, e.Kind, e.Code, e.Message, c.kind, c.code)
			}
			if n := len(s.Requests("files.completeUploadExternal")) - before; n != c.completes {
				t.Errorf("%s: %d completeUploadExternal requests, want %d", c.name, n, c.completes)
			}
			if got := len(s.AllPosted()) - sharedBefore; got != map[bool]int{true: 1}[c.shared] {
				t.Errorf("%s: %d shared", c.name, got)
			}
			if strings.Contains(res.Error.Message, st.DefaultBotToken) {
				t.Errorf("%s: token leaked: %q", c.name, res.Error.Message)
			}
		}
		if mode != "wasm" || testing.Short() {
			return
		}
		// No answer to completeUploadExternal: the plugin's timeout, under the call deadline.
		s.InjectFault("files.completeUploadExternal", st.NoAnswer())
		start := time.Now()
		res, err := h.Send("main", document("into the void", ""))
		if err != nil || res.Error == nil || res.Error.Kind != abi.SendUncertain {
			t.Fatalf("no answer: %+v %v after %v", res, err, time.Since(start))
		}
	})
}

// Buttons become an actions block under the text; a signed press comes back as a callback
// event for the message, in its thread; a forged one is refused (401) with no event.
func TestButtons(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s)}})
		fw := hook(t, s, h, "main")
		team := s.Team()
		root := team.Say(general, ann, "deploy?")
		if err := s.WaitAcked(wait, root.EventIDs...); err != nil {
			t.Fatal(err)
		}
		res, err := h.Send("main", abi.OutboundMessage{ChatID: general, ThreadID: root.TS, ScopeID: team.ID, Text: "Run `rm -rf build` <now>?",
			Buttons: []abi.Button{{ID: "approve:42", Label: "Approve", Style: abi.ButtonPrimary}, {ID: "deny:42", Label: "Deny", Style: abi.ButtonDanger},
				{ID: "later", Label: strings.Repeat("l", 100)}}})
		if err != nil || res.Error != nil || len(res.MessageIDs) != 1 {
			t.Fatalf("send: %+v %v", res, err)
		}
		posted := s.Posted(team.ID, general, root.TS)
		if len(posted) != 1 {
			t.Fatalf("posted %+v", posted)
		}
		msg := posted[0]
		if got := msg.SectionTexts(); len(got) != 1 || got[0] != "Run `rm -rf build` &lt;now&gt;?" {
			t.Fatalf("sections %q", got)
		}
		b := msg.Buttons()
		if len(b) != 3 || b[0] != (st.Button{ActionID: "approve:42", Value: "approve:42", Text: "Approve", Style: "primary"}) ||
			b[1].Style != "danger" || b[1].Value != "deny:42" || b[2].Style != "" || len([]rune(b[2].Text)) != 75 {
			t.Fatalf("buttons %+v", b)
		}
		p, err := team.PressButton(ann, msg, "deny:42")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range st.Forgeries() {
			if d, err := s.ForgeInteraction(f, p); err != nil || d.Status != 401 {
				t.Errorf("%v: %d %v %q", f, d.Status, err, d.Body)
			}
		}
		if got := fw.got(); len(got) != 1 { // the root's observation only
			t.Fatalf("forged presses produced events: %+v", got)
		}
		if d, err := s.Interact(p); err != nil || d.Status != 200 {
			t.Fatalf("press: %+v %v", d, err)
		}
		var cb *abi.InboundEvent
		for _, ev := range fw.got() {
			if ev.Kind == abi.EventCallback {
				cb = &ev
			}
		}
		want := abi.Source{ChatType: abi.ChatGroup, ChatID: general, ThreadID: root.TS, UserID: ann, UserName: "ann", ScopeID: team.ID, MessageID: msg.TS}
		if cb == nil || cb.CallbackID != "deny:42" || cb.Source != want || cb.ID == "" {
			t.Fatalf("callback %+v, want source %+v (events %+v)", cb, want, fw.got())
		}
		// Slack keeps a message's blocks through an edit without any: the edit after the press
		// sends the new text's section alone, and the buttons go. A message without buttons is
		// edited with text alone.
		if res, err := h.Send("main", abi.OutboundMessage{ChatID: general, EditMessageID: msg.TS, Text: "Denied by ann"}); err != nil || res.Error != nil {
			t.Fatalf("edit: %+v %v", res, err)
		}
		edited := s.Posted(team.ID, general, root.TS)[0]
		if len(edited.Buttons()) != 0 || len(edited.SectionTexts()) != 1 || edited.SectionTexts()[0] != "Denied by ann" || edited.Text != "Denied by ann" {
			t.Fatalf("edited: %+v", edited)
		}
		plain, err := h.Send("main", abi.OutboundMessage{ChatID: general, ThreadID: root.TS, Text: "v1"})
		if err != nil || plain.Error != nil {
			t.Fatalf("send: %+v %v", plain, err)
		}
		if res, err := h.Send("main", abi.OutboundMessage{ChatID: general, EditMessageID: plain.MessageIDs[0], Text: "v2"}); err != nil || res.Error != nil {
			t.Fatalf("edit: %+v %v", res, err)
		}
		if p := s.Posted(team.ID, general, root.TS); p[1].Text != "v2" || p[1].Blocks != "" {
			t.Fatalf("a plain message edited: %+v", p[1])
		}
		// A press of a top-level message has no thread.
		res, _ = h.Send("main", abi.OutboundMessage{ChatID: general, Text: "ok?", Buttons: []abi.Button{{ID: "yes", Label: "Yes"}}})
		top := s.Posted(team.ID, general, "-")
		p, err = team.PressButton(ann, top[len(top)-1], "yes")
		if err != nil || top[len(top)-1].TS != res.MessageIDs[0] {
			t.Fatal(err, res)
		}
		if d, err := s.Interact(p); err != nil || d.Status != 200 {
			t.Fatalf("press: %+v %v", d, err)
		}
		got := fw.got()
		if last := got[len(got)-1]; last.Kind != abi.EventCallback || last.CallbackID != "yes" || last.Source.ThreadID != "" || last.Source.MessageID != res.MessageIDs[0] {
			t.Fatalf("top-level press %+v", last)
		}
	})
}

// In Socket Mode a press comes in an "interactive" frame: dispatched, then acknowledged.
func TestSocketModeButtons(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		s.SetSocketMode(true)
		d := &dispatcher{}
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"sock": socketProfile(s)}, Dispatcher: d})
		team := s.Team()
		res, err := h.Send("sock", abi.OutboundMessage{ChatID: general, Text: "pick", Buttons: []abi.Button{{ID: "a", Label: "A"}}})
		if err != nil || res.Error != nil {
			t.Fatalf("send: %+v %v", res, err)
		}
		top := s.Posted(team.ID, general, "-")
		p, err := team.PressButton(ann, top[0], "a")
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.InteractSocket(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20 && !s.Acked(id); i++ {
			if _, err := h.Poll("sock", 300*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		if !s.Acked(id) {
			t.Fatalf("interactive frame not acknowledged: frames %+v", s.SocketFrames())
		}
		var cb []abi.InboundEvent
		for _, ev := range d.got() {
			if ev.Kind == abi.EventCallback {
				cb = append(cb, ev)
			}
		}
		if len(cb) != 1 || cb[0].CallbackID != "a" || cb[0].Source.MessageID != top[0].TS || cb[0].Source.UserID != ann {
			t.Fatalf("callbacks %+v", cb)
		}
	})
}
