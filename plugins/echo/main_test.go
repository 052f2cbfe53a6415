//go:build !wasip1

package main

import (
	"context"

	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// outbox is a loopback stand-in for the echo platform's outbox and inbox.
type outbox struct {
	mu     sync.Mutex
	got    []Message
	status int // answer to the next POST; 0 means 200
	inbox  []Message
	secret string // X-Echo-Secret of the last POST
}

func (o *outbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.Method == "GET" { // inbox: everything after the cursor
		after := r.URL.Query().Get("after")
		var out []Message
		cursor := after
		for _, m := range o.inbox {
			if m.ID > after {
				out = append(out, m)
				cursor = m.ID
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"messages": out, "cursor": cursor})
		return
	}
	var m Message
	json.NewDecoder(r.Body).Decode(&m)
	o.secret = r.Header.Get("X-Echo-Secret")
	switch o.status {
	case 429:
		w.WriteHeader(429)
		w.Write([]byte(`{"ok":false,"error":"rate_limited","retry_after":3}`))
	case 500:
		w.WriteHeader(500)
		w.Write([]byte(`<html>oops</html>`))
	case 400:
		w.WriteHeader(400)
		w.Write([]byte(`{"ok":false,"error":"chat_not_found"}`))
	default:
		o.got = append(o.got, m)
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "message_id": "m" + string(rune('0'+len(o.got)))})
	}
	o.status = 0
}

// hosts runs each test against the plugin natively and as Wasm.
func hosts(t *testing.T, o sdktest.Options, f func(t *testing.T, h sdktest.Host)) {
	t.Run("native", func(t *testing.T) { f(t, sdktest.Native(t, o)) })
	t.Run("wasm", func(t *testing.T) { f(t, sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), o)) })
}

func TestEcho(t *testing.T) {
	ob := &outbox{inbox: []Message{{ID: "001", ChatID: "5", Text: "one"}, {ID: "002", ChatID: "5", Text: "two"}}}
	srv := httptest.NewServer(ob)
	defer srv.Close()
	opts := sdktest.Options{EgressExtra: []string{"127.0.0.1"}, Profiles: map[string]any{
		"main":   map[string]any{"outbox_url": srv.URL + "/out", "inbox_url": srv.URL + "/in", "secret": "s3"},
		"nosecr": map[string]any{"outbox_url": srv.URL + "/out"},
	}}
	hosts(t, opts, func(t *testing.T, h sdktest.Host) {
		// Webhook: the secret is checked; a good request yields one event.
		res, err := h.Webhook("main", abi.WebhookRequest{Method: "POST", Body: []byte(`{"id":"9","chat_id":"5","text":"hi"}`)})
		if err != nil || res.Response.Status != 401 || len(res.Events) != 0 {
			t.Fatalf("missing secret: %+v %v", res, err)
		}
		res, err = h.Webhook("main", abi.WebhookRequest{Method: "POST", Headers: map[string][]string{"x-echo-secret": {"s3"}},
			Body: []byte(`{"id":"9","chat_id":"5","user_id":"u","text":"hi"}`)})
		if err != nil || res.Response.Status != 200 || len(res.Events) != 1 || res.Events[0].Source.ChatType != abi.ChatDM || res.Events[0].Text != "hi" {
			t.Fatalf("good webhook: %+v %v", res, err)
		}
		res, _ = h.Webhook("nosecr", abi.WebhookRequest{Method: "POST", Body: []byte(`{not json`)})
		if res.Response.Status != 400 {
			t.Fatalf("malformed body answered %d", res.Response.Status)
		}

		// Send: success, then each failure kind maps to its typed error.
		sr, err := h.Send("main", abi.OutboundMessage{ChatID: "5", Text: "reply", DeliveryID: "d1"})
		if err != nil || sr.Error != nil || len(sr.MessageIDs) != 1 {
			t.Fatalf("send: %+v %v", sr, err)
		}
		ob.mu.Lock()
		if ob.secret != "s3" {
			t.Fatalf("the outbox post carried secret %q, want the profile's", ob.secret)
		}
		ob.mu.Unlock()
		for status, want := range map[int]abi.SendError{
			429: {Kind: abi.SendRetryable, RetryAfterMs: 3000},
			500: {Kind: abi.SendRetryable},
			400: {Kind: abi.SendPermanent, Code: "chat_not_found"},
		} {
			ob.mu.Lock()
			ob.status = status
			ob.mu.Unlock()
			sr, err := h.Send("main", abi.OutboundMessage{ChatID: "5", Text: "x"})
			if err != nil || sr.Error == nil || sr.Error.Kind != want.Kind || sr.Error.RetryAfterMs != want.RetryAfterMs ||
				(want.Code != "" && sr.Error.Code != want.Code) {
				t.Fatalf("status %d: %+v %v", status, sr, err)
			}
		}

		// Poll: the cursor lives in the host's kv, so a second poll returns nothing new.
		pr, err := h.Poll("main", time.Second)
		if err != nil || len(pr.Events) != 2 || pr.Events[1].Text != "two" {
			t.Fatalf("poll: %+v %v", pr, err)
		}
		pr, err = h.Poll("main", time.Second)
		if err != nil || len(pr.Events) != 0 {
			t.Fatalf("second poll: %+v %v", pr, err)
		}
	})
}

// recorder is a Dispatcher that records events, failing while fail is set.
type recorder struct {
	mu     sync.Mutex
	events []abi.InboundEvent
	fail   bool
}

func (r *recorder) Dispatch(_ context.Context, _ sdktest.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return abi.DispatchReply{}, abi.Errorf(abi.CodeIO, "store down")
	}
	r.events = append(r.events, ev)
	return abi.DispatchReply{}, nil
}

// With a host that dispatches, poll records each event before moving its cursor: a failed
// record leaves the cursor, so the batch comes again.
func TestPollDispatchesBeforeCommitting(t *testing.T) {
	ob := &outbox{inbox: []Message{{ID: "001", ChatID: "5", Text: "one"}, {ID: "002", ChatID: "5", Text: "two"}}}
	srv := httptest.NewServer(ob)
	defer srv.Close()
	rec := &recorder{fail: true}
	opts := sdktest.Options{EgressExtra: []string{"127.0.0.1"}, Dispatcher: rec, Profiles: map[string]any{"main": map[string]any{"outbox_url": srv.URL + "/out", "inbox_url": srv.URL + "/in"}}}
	hosts(t, opts, func(t *testing.T, h sdktest.Host) {
		rec.mu.Lock()
		rec.fail, rec.events = true, nil
		rec.mu.Unlock()
		if _, err := h.Poll("main", time.Second); err == nil {
			t.Fatal("poll succeeded although the host could not record the events")
		}
		rec.mu.Lock()
		rec.fail = false
		rec.mu.Unlock()
		pr, err := h.Poll("main", time.Second)
		if err != nil || len(pr.Events) != 0 {
			t.Fatalf("poll: %+v %v", pr, err)
		}
		pr, err = h.Poll("main", time.Second)
		if err != nil || len(pr.Events) != 0 {
			t.Fatalf("second poll: %+v %v", pr, err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.events) != 2 || rec.events[0].Text != "one" {
			t.Fatalf("recorded %+v", rec.events)
		}
	})
}

func TestAttachmentsOnTheWire(t *testing.T) {
	ob := &outbox{}
	srv := httptest.NewServer(ob)
	defer srv.Close()
	opts := sdktest.Options{EgressExtra: []string{"127.0.0.1"}, Profiles: map[string]any{"main": map[string]any{"outbox_url": srv.URL + "/out"}}}
	hosts(t, opts, func(t *testing.T, h sdktest.Host) {
		if !slices.Contains(h.Manifest().Capabilities, abi.CapAttachments) {
			t.Fatal("echo does not declare attachments")
		}
		res, err := h.Webhook("main", abi.WebhookRequest{Method: "POST", Body: []byte(
			`{"id":"1","chat_id":"5","text":"","attachments":[{"kind":"image","name":"a.png","size":3,"url":"data:image/png;base64,AQID"}]}`)})
		if err != nil || len(res.Events) != 1 || len(res.Events[0].Attachments) != 1 {
			t.Fatalf("webhook: %+v %v", res, err)
		}
		if a := res.Events[0].Attachments[0]; a.Kind != abi.AttachImage || a.Name != "a.png" || a.Size != 3 || a.Ref != "data:image/png;base64,AQID" || a.Data != nil {
			t.Fatalf("attachment %+v", a)
		}
		sr, err := h.Send("main", abi.OutboundMessage{ChatID: "5", DeliveryID: "d2",
			Attachments: []abi.Attachment{{Kind: abi.AttachDocument, Name: "r.pdf", MIMEType: "application/pdf", Data: []byte("%PDF")}}})
		if err != nil || sr.Error != nil {
			t.Fatalf("send: %+v %v", sr, err)
		}
		ob.mu.Lock()
		last := ob.got[len(ob.got)-1]
		ob.mu.Unlock()
		if len(last.Attachments) != 1 || last.Attachments[0].URL != "data:application/pdf;base64,JVBERg==" || last.Attachments[0].Size != 4 {
			t.Fatalf("posted %+v", last.Attachments)
		}
	})
}

func TestDecodeDataURL(t *testing.T) {
	for u, want := range map[string]string{"data:image/png;base64,AQID": "\x01\x02\x03", "data:,hello%20there": "hello there", "data:text/plain;base64,aGk=": "hi"} {
		_, got, err := decodeDataURL(u)
		if err != nil || string(got) != want {
			t.Errorf("%s: %q %v", u, got, err)
		}
	}
	for _, bad := range []string{"https://x/y", "data:image/png;base64", "data:;base64,!!!"} {
		if _, _, err := decodeDataURL(bad); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}
