//go:build !wasip1

package main

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// scopedHost runs the plugin against the fake standing in for api.telegram.org, so that the
// manifest's egress scopes apply to every request (nothing else is granted).
func scopedHost(t *testing.T, mode string, tg *tgt.Server) sdktest.Host {
	t.Helper()
	o := sdktest.Options{Profiles: map[string]any{"main": profile(tg, tgt.DefaultToken)},
		EgressAlias: map[string]string{strings.TrimPrefix(tg.URL(), "http://"): "api.telegram.org"}}
	if mode == "native" {
		return sdktest.Native(t, o)
	}
	return sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), o)
}

func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A photo becomes an attachment event whose Ref fetch turns into the photo's bytes: getFile,
// then the file host, each from the fetch export only.
func TestPhotoEventAndFetch(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		bot := tg.Bot()
		h := scopedHost(t, mode, tg)
		img := pngOf(t, 40, 30)
		_, f := bot.Media(ada.ID, ada, tgt.Attach{Data: img}, "what is this?")
		bot.Media(ada.ID, ada, tgt.Attach{Data: []byte("only a photo")}, "")
		res := mustPoll(t, h, "main")
		if len(res.Events) != 2 {
			t.Fatalf("events %+v", res.Events)
		}
		ev := res.Events[0]
		if ev.Kind != abi.EventMessage || ev.Text != "what is this?" || len(ev.Attachments) != 1 {
			t.Fatalf("event %+v", ev)
		}
		att := ev.Attachments[0]
		if att.Ref != f.ID || att.Kind != abi.AttachImage || att.Size != int64(len(img)) || att.Caption != "what is this?" {
			t.Fatalf("attachment %+v (file %s)", att, f.ID)
		}
		if e := res.Events[1]; e.Kind != abi.EventMessage || e.Text != "" || len(e.Attachments) != 1 {
			t.Fatalf("photo without caption: %+v", e)
		}
		got, err := h.Fetch("main", att, 1<<20)
		if err != nil || !bytes.Equal(got.Data, img) || got.MIMEType != "image/jpeg" {
			t.Fatalf("fetch: %v %+v", err, got)
		}
		if len(tg.Requests("getFile", 0)) != 1 || len(tg.Downloads()) != 1 || tg.Downloads()[0].Status != 200 {
			t.Fatalf("getFile %d, downloads %+v", len(tg.Requests("getFile", 0)), tg.Downloads())
		}
	})
}

// Sizes over the Bot API's 20 MB or the host's MaxBytes are refused before any download; a
// file larger than claimed is cut at MaxBytes; an unknown file is not_found.
func TestFetchLimits(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		h := scopedHost(t, mode, tg)
		// Claimed 25 MB in the update: refused before getFile.
		big := tg.PutFile(tgt.File{Data: []byte("x"), Size: 25 << 20})
		_, err := h.Fetch("main", abi.Attachment{Kind: abi.AttachDocument, Ref: big.ID, Size: 25 << 20}, 100<<20)
		if abi.CodeOf(err) != abi.CodeTooLarge || !strings.Contains(err.Error(), "download limit") {
			t.Fatalf("25 MB claimed: %v", err)
		}
		if n := len(tg.Requests("getFile", 0)); n != 0 {
			t.Fatalf("getFile called %d times for a file known to be too large", n)
		}
		// Size unknown in the update: getFile refuses it ("file is too big"), no download.
		if _, err := h.Fetch("main", abi.Attachment{Kind: abi.AttachDocument, Ref: big.ID}, 100<<20); abi.CodeOf(err) != abi.CodeTooLarge {
			t.Fatalf("25 MB by getFile: %v", err)
		}
		// getFile says 10 bytes, the host takes 4: refused before the download.
		ten := tg.AddFile("", []byte("0123456789"))
		if _, err := h.Fetch("main", abi.Attachment{Kind: abi.AttachDocument, Ref: ten.ID}, 4); abi.CodeOf(err) != abi.CodeTooLarge {
			t.Fatalf("over MaxBytes: %v", err)
		}
		if n := len(tg.Downloads()); n != 0 {
			t.Fatalf("%d downloads of refused files", n)
		}
		// A file bigger than Telegram claimed: the download stops at MaxBytes.
		liar := tg.PutFile(tgt.File{Data: bytes.Repeat([]byte("y"), 4096), Size: 10})
		if _, err := h.Fetch("main", abi.Attachment{Kind: abi.AttachDocument, Ref: liar.ID}, 100); abi.CodeOf(err) != abi.CodeTooLarge {
			t.Fatalf("past MaxBytes: %v", err)
		}
		if _, err := h.Fetch("main", abi.Attachment{Kind: abi.AttachDocument, Ref: "gone"}, 100); abi.CodeOf(err) != abi.CodeNotFound {
			t.Fatalf("unknown file: %v", err)
		}
		tg.InjectFault("file", tgt.ServerError(502))
		if _, err := h.Fetch("main", abi.Attachment{Kind: abi.AttachDocument, Ref: ten.ID}, 100); abi.CodeOf(err) != abi.CodeIO {
			t.Fatalf("download 502: %v", err)
		}
	})
}

// Attachments upload as multipart to the method of their kind, with Text as caption and the
// bytes, name and type intact.
func TestSendAttachments(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		tg.AddPrivate(ada)
		h := scopedHost(t, mode, tg)
		img := pngOf(t, 64, 48)
		ids := sendOK(t, h, abi.OutboundMessage{ChatID: itoa(ada.ID), Text: "a chart",
			Attachments: []abi.Attachment{{Kind: abi.AttachImage, MIMEType: "image/png", Name: "chart.png", Data: img}}})
		sendOK(t, h, abi.OutboundMessage{ChatID: itoa(ada.ID),
			Attachments: []abi.Attachment{{Kind: abi.AttachVoice, MIMEType: "audio/ogg", Data: []byte("OggS voice")}}})
		sendOK(t, h, abi.OutboundMessage{ChatID: itoa(ada.ID), Text: "the report",
			Attachments: []abi.Attachment{{Kind: abi.AttachDocument, MIMEType: "application/pdf", Name: "../etc/report.pdf", Data: []byte("%PDF-1.7")}}})
		// Not an image Telegram can read as a photo: refused before posting, sent as a document.
		sendOK(t, h, abi.OutboundMessage{ChatID: itoa(ada.ID), Text: "odd",
			Attachments: []abi.Attachment{{Kind: abi.AttachImage, MIMEType: "image/heic", Name: "odd.heic", Data: []byte("heic?")}}})
		sent := tg.Sent(ada.ID, 0)
		if len(sent) != 4 {
			t.Fatalf("sent %+v", sent)
		}
		for i, w := range []struct {
			method, field, name, ctype, caption string
			data                                []byte
		}{
			{"sendPhoto", "photo", "chart.png", "image/png", "a chart", img},
			{"sendVoice", "voice", "voice.ogg", "audio/ogg", "", []byte("OggS voice")},
			{"sendDocument", "document", "report.pdf", "application/pdf", "the report", []byte("%PDF-1.7")},
			{"sendDocument", "document", "odd.heic", "image/heic", "odd", []byte("heic?")},
		} {
			s := sent[i]
			if s.Method != w.method || s.File == nil || s.File.Field != w.field || s.File.FileName != w.name ||
				s.File.ContentType != w.ctype || !bytes.Equal(s.File.Data, w.data) || s.Message.Caption != w.caption {
				t.Errorf("upload %d: %s %+v caption %q, want %+v", i, s.Method, s.File, s.Message.Caption, w)
			}
		}
		if len(ids) != 1 || ids[0] != itoa(sent[0].Message.MessageID) {
			t.Fatalf("ids %v", ids)
		}
		if n := len(tg.Requests("sendPhoto", 0)); n != 2 {
			t.Fatalf("%d sendPhoto requests, want 2 (the refused one retried as a document)", n)
		}
	})
}

// A text too long for a caption follows the file as a message of its own; limits are refused
// before anything is sent.
func TestSendAttachmentLimits(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		tg.AddPrivate(ada)
		h := scopedHost(t, mode, tg)
		long := strings.Repeat("word ", 300) // 1500 units
		ids := sendOK(t, h, abi.OutboundMessage{ChatID: itoa(ada.ID), Text: long,
			Attachments: []abi.Attachment{{Kind: abi.AttachDocument, Name: "a.txt", Data: []byte("a")}}})
		sent := tg.Sent(ada.ID, 0)
		if len(ids) != 2 || len(sent) != 2 || sent[0].File == nil || sent[0].Message.Caption != "" ||
			sent[1].Message.Text != strings.TrimSpace(long) {
			t.Fatalf("ids %v sent %+v", ids, sent)
		}
		for _, c := range []struct {
			msg  abi.OutboundMessage
			code string
		}{
			{abi.OutboundMessage{ChatID: itoa(ada.ID), Attachments: []abi.Attachment{{Kind: abi.AttachDocument}}}, "empty_file"},
			{abi.OutboundMessage{ChatID: itoa(ada.ID), Attachments: []abi.Attachment{{Kind: abi.AttachDocument, Data: []byte("a")},
				{Kind: abi.AttachDocument, Data: []byte("b")}}}, "too_many_attachments"},
			{abi.OutboundMessage{ChatID: itoa(ada.ID), Text: strings.Repeat("x", 4097),
				Attachments: []abi.Attachment{{Kind: abi.AttachDocument, Data: []byte("a")}}}, "message_too_long"},
		} {
			if e := sendErr(t, h, c.msg); e.Kind != abi.SendPermanent || e.Code != c.code {
				t.Errorf("%s: %+v", c.code, e)
			}
		}
		// Over Telegram's 50 MB: refused before any host call (no host needed to check it).
		r := sendMedia(&api{}, newBudget(uploadBudget), &abi.OutboundMessage{ChatID: itoa(ada.ID),
			Attachments: []abi.Attachment{{Kind: abi.AttachVideo, Data: make([]byte, MaxUpload+1)}}}, nil)
		if r.Error == nil || r.Error.Kind != abi.SendPermanent || r.Error.Code != abi.CodeTooLarge {
			t.Errorf("over 50 MB: %+v", r)
		}
		if mode == "native" { // 9 MB through the Wasm input limit is the host's business
			// Within Telegram's limit but over the host's egress request cap (8 MiB by
			// default): refused by the host before sending, so permanent, not uncertain.
			e := sendErr(t, h, abi.OutboundMessage{ChatID: itoa(ada.ID),
				Attachments: []abi.Attachment{{Kind: abi.AttachDocument, Data: make([]byte, 9<<20)}}})
			if e.Kind != abi.SendPermanent || e.Code != abi.CodeTooLarge {
				t.Errorf("9 MB over the egress cap: %+v", e)
			}
		}
		if n := len(tg.Requests("", 0)) - len(tg.Requests("getMe", 0)); n != 2 {
			t.Fatalf("%d requests, want only the 2 of the long caption", n)
		}
	})
}

// An upload that reached Telegram but was answered 502, reset or not at all is uncertain:
// the host must not repeat it.
func TestUploadFaultsAreUncertain(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		tg.AddPrivate(ada)
		h := scopedHost(t, mode, tg)
		msg := abi.OutboundMessage{ChatID: itoa(ada.ID), Text: "pic",
			Attachments: []abi.Attachment{{Kind: abi.AttachImage, MIMEType: "image/png", Data: pngOf(t, 8, 8)}}}
		for i, f := range []tgt.Fault{tgt.ServerError(502).AfterEffect(), tgt.ConnectionReset().AfterEffect()} {
			tg.InjectFault("sendPhoto", f)
			if e := sendErr(t, h, msg); e.Kind != abi.SendUncertain {
				t.Errorf("%s: %+v", f, e)
			}
			if s := tg.Sent(ada.ID, 0); len(s) != i+1 || s[i].File == nil {
				t.Errorf("%s: the upload was not recorded: %+v", f, s)
			}
		}
		// Refused before the effect (429): retryable, nothing posted.
		tg.InjectFault("sendPhoto", tgt.FloodWait(3))
		if e := sendErr(t, h, msg); e.Kind != abi.SendRetryable || e.RetryAfterMs != 3000 {
			t.Errorf("429: %+v", e)
		}
		if n := len(tg.Sent(ada.ID, 0)); n != 2 {
			t.Fatalf("%d sent", n)
		}
	})
}

// Buttons become an inline keyboard whose callback_data are their ids; a press comes back as a
// callback event from the poll that also answers it (answerCallbackQuery).
func TestButtonsAndCallbacks(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		bot := tg.Bot()
		forum, topics := tg.AddForum(-1001000000001, "Team", tgt.Topic{Name: "ops"})
		h := scopedHost(t, mode, tg)
		buttons := []abi.Button{{ID: "approve:7", Label: "Approve", Style: abi.ButtonPrimary}, {ID: "deny:7", Label: "Deny", Style: abi.ButtonDanger}}
		ids := sendOK(t, h, abi.OutboundMessage{ChatID: itoa(forum.ID), ThreadID: itoa(topics[0]), Text: "run rm -rf build/?", Buttons: buttons})
		sent := tg.Sent(forum.ID, topics[0])
		if len(sent) != 1 {
			t.Fatalf("sent %+v", sent)
		}
		var markup struct {
			Rows [][]struct {
				Text string `json:"text"`
				Data string `json:"callback_data"`
			} `json:"inline_keyboard"`
		}
		if err := json.Unmarshal(sent[0].Message.ReplyMarkup, &markup); err != nil || len(markup.Rows) != 1 || len(markup.Rows[0]) != 2 ||
			markup.Rows[0][0].Data != "approve:7" || markup.Rows[0][1].Text != "Deny" {
			t.Fatalf("reply_markup %s", sent[0].Message.ReplyMarkup)
		}
		// Buttons on a file go under it.
		sendOK(t, h, abi.OutboundMessage{ChatID: itoa(forum.ID), ThreadID: itoa(topics[0]), Buttons: buttons[:1],
			Attachments: []abi.Attachment{{Kind: abi.AttachDocument, Data: []byte("log")}}})
		if s := tg.Sent(forum.ID, topics[0]); len(s) != 2 || !strings.Contains(string(s[1].Message.ReplyMarkup), "approve:7") {
			t.Fatalf("file markup %+v", s)
		}

		u, err := bot.Press(forum.ID, sent[0].Message.MessageID, bob, "deny:7")
		if err != nil {
			t.Fatal(err)
		}
		res := mustPoll(t, h, "main")
		if len(res.Events) != 1 {
			t.Fatalf("events %+v", res.Events)
		}
		ev := res.Events[0]
		if ev.Kind != abi.EventCallback || ev.CallbackID != "deny:7" || ev.Source.MessageID != ids[0] || ev.Source.UserID != itoa(bob.ID) ||
			ev.Source.ChatID != itoa(forum.ID) || ev.Source.ThreadID != itoa(topics[0]) {
			t.Fatalf("callback event %+v", ev)
		}
		if a := tg.Answers(); len(a) != 1 || a[0].QueryID != u.CallbackQuery.ID {
			t.Fatalf("answers %+v", a)
		}
		// A failed answer loses nothing: the press is the host's all the same.
		tg.InjectFault("answerCallbackQuery", tgt.ServerError(502))
		bot.Press(forum.ID, sent[0].Message.MessageID, ada, "approve:7")
		if res := mustPoll(t, h, "main"); len(res.Events) != 1 || res.Events[0].CallbackID != "approve:7" {
			t.Fatalf("after a failed answer: %+v", res.Events)
		}
		// Button ids the ABI does not allow are refused before sending.
		e := sendErr(t, h, abi.OutboundMessage{ChatID: itoa(forum.ID), Text: "x", Buttons: []abi.Button{{ID: "no spaces", Label: "x"}}})
		if e.Kind != abi.SendPermanent || e.Code != "bad_buttons" {
			t.Fatalf("bad button: %+v", e)
		}
		for _, r := range tg.Requests("getUpdates", 0) {
			if !strings.Contains(r.Params["allowed_updates"], "callback_query") {
				t.Fatalf("allowed_updates %s", r.Params["allowed_updates"])
			}
		}
	})
}

// The webhook path maps files and presses as poll does, asks Telegram for callback_query in
// setWebhook, and answers the press from the webhook call.
func TestWebhookMediaAndCallbacks(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		bot := tg.Bot()
		tg.AddPrivate(ada)
		fw := &forwarder{profile: "hook"}
		srv := httptest.NewServer(fw)
		defer srv.Close()
		h := newHost(t, mode, map[string]any{
			"hook": profile(tg, bot.Token(), "mode", "webhook", "webhook_url", srv.URL+"/hooks/telegram/hook", "secret_token", "s3cr3t-T0ken"),
		}, nil)
		fw.h = h
		if _, err := h.Poll("hook", pollWait); err != nil {
			t.Fatal(err)
		}
		if s := tg.Requests("setWebhook", 0); len(s) != 1 || !strings.Contains(s[0].Params["allowed_updates"], "callback_query") {
			t.Fatalf("setWebhook %+v", s)
		}
		_, f := bot.Media(ada.ID, ada, tgt.Attach{Kind: tgt.KindVoice, Data: []byte("OggS"), Duration: 1}, "")
		res, err := h.Send("hook", abi.OutboundMessage{ChatID: itoa(ada.ID), Text: "ok?", Buttons: []abi.Button{{ID: "yes", Label: "Yes"}}})
		if err != nil || res.Error != nil {
			t.Fatalf("send %+v %v", res, err)
		}
		msgID, _ := strconv.ParseInt(res.MessageIDs[0], 10, 64)
		u, err := bot.Press(ada.ID, msgID, ada, "yes")
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.Wait(wait, func() bool { return len(fw.got()) == 2 }); err != nil {
			t.Fatalf("pushes: %v (deliveries %+v)", err, bot.Deliveries())
		}
		got := fw.got()
		if v := got[0]; len(v.Attachments) != 1 || v.Attachments[0].Kind != abi.AttachVoice || v.Attachments[0].Ref != f.ID {
			t.Fatalf("voice %+v", v)
		}
		if c := got[1]; c.Kind != abi.EventCallback || c.CallbackID != "yes" || c.Source.MessageID != res.MessageIDs[0] {
			t.Fatalf("callback %+v", c)
		}
		if a := tg.Answers(); len(a) != 1 || a[0].QueryID != u.CallbackQuery.ID {
			t.Fatalf("answers %+v", a)
		}
	})
}
