//go:build !wasip1

package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	st "github.com/hermes-host/hermes-host/conformance/slacktest"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

const wait = 20 * time.Second

const (
	ann     = "U0ANN"
	general = "C0GENERAL"
)

// newHost starts the plugin natively or as Wasm. (These tests need the host, so this file builds
// only natively: the Wasm case is driven from here.)
func newHost(t *testing.T, mode string, o sdktest.Options) sdktest.Host {
	t.Helper()
	o.EgressExtra = []string{"127.0.0.1"}
	if mode == "native" {
		return sdktest.Native(t, o)
	}
	return sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), o)
}

// each runs f natively and as Wasm, each time with a fresh fake.
func each(t *testing.T, f func(t *testing.T, mode string, s *st.Server), opts ...st.Option) {
	for _, mode := range []string{"native", "wasm"} {
		t.Run(mode, func(t *testing.T) {
			s := st.New(t, opts...)
			s.Team().AddChannel(general, "general")
			s.Team().AddUser(ann, "ann")
			f(t, mode, s)
		})
	}
}

// profile is an events-mode configuration pointing at the fake.
func profile(s *st.Server, extra ...any) map[string]any {
	cfg := map[string]any{"bot_token": st.DefaultBotToken, "signing_secret": s.SigningSecret(), "api_base": s.APIURL()}
	for i := 0; i+1 < len(extra); i += 2 {
		cfg[extra[i].(string)] = extra[i+1]
	}
	return cfg
}

// forwarder is the host's /hooks/slack/{profile}: it hands the fake's requests to the plugin's
// webhook export and keeps the events, deduplicated by id as the host does.
type forwarder struct {
	h       sdktest.Host
	profile string
	mu      sync.Mutex
	events  []abi.InboundEvent
	seen    map[string]int
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	res, err := f.h.Webhook(f.profile, abi.WebhookRequest{Method: r.Method, Path: r.URL.Path, Headers: r.Header, Body: body})
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	for _, ev := range res.Events {
		f.seen[ev.ID]++
		if f.seen[ev.ID] == 1 {
			f.events = append(f.events, ev)
		}
	}
	f.mu.Unlock()
	for k, vs := range res.Response.Headers {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.Response.Status)
	w.Write(res.Response.Body)
}

func (f *forwarder) got() []abi.InboundEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]abi.InboundEvent(nil), f.events...)
}

func (f *forwarder) times(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[id]
}

// hook starts a forwarder for profile and points the fake's Request URL at it.
func hook(t *testing.T, s *st.Server, h sdktest.Host, profile string) *forwarder {
	fw := &forwarder{h: h, profile: profile}
	srv := httptest.NewServer(fw)
	t.Cleanup(srv.Close)
	s.SetRequestURL(srv.URL + "/hooks/slack/" + profile)
	return fw
}

func TestWebhookSigning(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s), "nosecret": profile(s, "signing_secret", "")}})
		fw := hook(t, s, h, "main")
		if _, err := s.VerifyURL(); err != nil {
			t.Fatal(err)
		}
		env := s.Team().Envelope(st.Event{Type: "message", User: ann, Text: "forged", Channel: general, ChannelType: "channel", TS: "1700000000.000001"})
		for _, f := range st.Forgeries() {
			d, err := s.Forge(f, env)
			if err != nil || d.Status != 401 {
				t.Errorf("%v: %d %v %q", f, d.Status, err, d.Body)
			}
		}
		if got := fw.got(); len(got) != 0 {
			t.Fatalf("forgeries produced events: %+v", got)
		}
		// A GET is refused. A profile without a signing secret refuses everything: the runtime
		// disables it at load (configure); called anyway, the export answers 403.
		if res, err := h.Webhook("main", abi.WebhookRequest{Method: "GET"}); err != nil || res.Response.Status != 405 {
			t.Fatalf("GET: %+v %v", res, err)
		}
		res, err := h.Webhook("nosecret", abi.WebhookRequest{Method: "POST", Body: []byte(`{}`)})
		switch {
		case mode == "wasm" && (err == nil || !strings.Contains(err.Error(), "needs signing_secret")):
			t.Fatalf("profile without a secret: %+v %v", res, err)
		case mode == "native" && (err != nil || res.Response.Status != 403 || len(res.Events) != 0):
			t.Fatalf("profile without a secret: %+v %v", res, err)
		}
	})
}

func TestWebhookEvents(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s)}})
		fw := hook(t, s, h, "main")
		team := s.Team()

		chatter := team.Say(general, ann, "just chatting")
		m := team.Mention(general, ann, "deploy &amp; <https://x.example|the docs>")
		// Slack delivers events concurrently: the reply comes after the mention was handled, as a
		// person's reply would.
		if err := s.WaitAcked(wait, m.EventIDs...); err != nil {
			t.Fatal(err)
		}
		reply := team.Reply(general, m.TS, ann, "and staging too")      // a followed thread
		other := team.Say(general, ann, "another top-level line")       // unaddressed again
		stray := team.Reply(general, other.TS, ann, "a thread of chat") // not followed
		dm := team.DM(ann, "!new")
		a := team.AssistantThreadStarted(ann, general)
		inThread := team.DMReply(ann, a.TS, "summarise the channel")
		var ids []string
		for _, p := range []st.Posted{chatter, m, reply, other, stray, dm, a, inThread} {
			ids = append(ids, p.EventIDs...)
		}
		if err := s.WaitAcked(wait, ids...); err != nil {
			t.Fatal(err)
		}
		byID := map[string]abi.InboundEvent{}
		for _, ev := range fw.got() {
			byID[ev.ID] = ev
		}
		key := func(ts string) string { return team.ID + ":" + general + ":" + ts }
		dmID := team.AddDM(ann)

		check := func(name, id string, want abi.InboundEvent) {
			t.Helper()
			got, ok := byID[id]
			if !ok {
				t.Errorf("%s: no event %s (have %v)", name, id, keys(byID))
				return
			}
			want.ID = id
			want.UnixMs, want.Source.MessageID = got.UnixMs, got.Source.MessageID
			if got.Kind != want.Kind || got.Text != want.Text || got.Source != want.Source || got.Mentioned != want.Mentioned {
				t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
			}
		}
		src := func(chatType, chat, thread string) abi.Source {
			return abi.Source{ChatType: chatType, ChatID: chat, ThreadID: thread, UserID: ann, ScopeID: team.ID}
		}
		check("unmentioned top-level", "obs:"+key(chatter.TS), abi.InboundEvent{Kind: abi.EventObserve, Text: "just chatting", Source: src(abi.ChatGroup, general, "")})
		check("mention", "msg:"+key(m.TS), abi.InboundEvent{Kind: abi.EventMessage, Mentioned: true,
			Text: "deploy & the docs (https://x.example)", Source: src(abi.ChatGroup, general, m.TS)})
		check("reply in a followed thread", "msg:"+key(reply.TS), abi.InboundEvent{Kind: abi.EventMessage, Text: "and staging too", Source: src(abi.ChatGroup, general, m.TS)})
		check("second top-level", "obs:"+key(other.TS), abi.InboundEvent{Kind: abi.EventObserve, Text: "another top-level line", Source: src(abi.ChatGroup, general, "")})
		check("unfollowed thread", "obs:"+key(stray.TS), abi.InboundEvent{Kind: abi.EventObserve, Text: "a thread of chat", Source: src(abi.ChatGroup, general, other.TS)})
		check("dm command", "msg:"+team.ID+":"+dmID+":"+dm.TS, abi.InboundEvent{Kind: abi.EventMessage, Text: "/new", Source: src(abi.ChatDM, dmID, "")})
		check("assistant thread", "ev:"+a.EventIDs[0], abi.InboundEvent{Kind: abi.EventSeed, Source: src(abi.ChatDM, dmID, a.TS)})
		check("assistant thread message", "msg:"+team.ID+":"+dmID+":"+inThread.TS, abi.InboundEvent{Kind: abi.EventMessage,
			Text: "summarise the channel", Source: src(abi.ChatDM, dmID, a.TS)})
		// The mention's message and app_mention events are one event.
		if n := fw.times("msg:" + key(m.TS)); n != 2 {
			t.Errorf("mention: %d deliveries of its id, want 2 (message + app_mention)", n)
		}
		if len(byID) != 8 {
			t.Errorf("%d distinct events, want 8: %v", len(byID), keys(byID))
		}

		// The bot's own posts come back as events: skipped. An edit is observed, a deletion
		// redacted.
		if res, err := h.Send("main", abi.OutboundMessage{ChatID: general, ThreadID: m.TS, ScopeID: team.ID, Text: "on it"}); err != nil || res.Error != nil {
			t.Fatalf("send: %+v %v", res, err)
		}
		ed := team.Edit(general, reply.TS, "and prod too")
		del := team.Delete(general, chatter.TS)
		if err := s.WaitSettled(wait); err != nil {
			t.Fatal(err)
		}
		if e := byIDNow(fw, "ev:"+ed.EventIDs[0]); e == nil || e.Kind != abi.EventObserve || e.Text != "(edited) and prod too" || e.Source.ThreadID != m.TS {
			t.Errorf("edit: %+v", e)
		}
		if e := byIDNow(fw, "ev:"+del.EventIDs[0]); e == nil || e.Kind != abi.EventRedact || e.Source.MessageID != chatter.TS {
			t.Errorf("delete: %+v", e)
		}
		if n := len(fw.got()); n != 10 {
			t.Errorf("%d events after the bot's post, an edit and a deletion, want 10", n)
		}
	})
}

func byIDNow(fw *forwarder, id string) *abi.InboundEvent {
	for _, ev := range fw.got() {
		if ev.ID == id {
			return &ev
		}
	}
	return nil
}

func keys(m map[string]abi.InboundEvent) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Two workspaces with the same channel id: the scope tells them apart, and each reply goes out
// with its own workspace's token.
func TestWorkspaces(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		two := s.AddTeam("T0SECOND", "Second", "xoxb-2-second-workspace")
		two.AddChannel(general, "general")
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s,
			"workspaces", map[string]any{"T0SECOND": map[string]any{"bot_token": two.BotToken}})}})
		fw := hook(t, s, h, "main")
		one := s.Team()
		a := one.Mention(general, ann, "from one")
		b := two.Mention(general, ann, "from two")
		if err := s.WaitAcked(wait, append(a.EventIDs, b.EventIDs...)...); err != nil {
			t.Fatal(err)
		}
		got := fw.got()
		if len(got) != 2 || got[0].Source.ScopeID == got[1].Source.ScopeID || got[0].Source.ChatID != got[1].Source.ChatID {
			t.Fatalf("events %+v", got)
		}
		for _, ev := range got {
			res, err := h.Send("main", abi.OutboundMessage{ChatType: ev.Source.ChatType, ChatID: ev.Source.ChatID,
				ThreadID: ev.Source.ThreadID, ScopeID: ev.Source.ScopeID, Text: "hi " + ev.Source.ScopeID})
			if err != nil || res.Error != nil {
				t.Fatalf("send: %+v %v", res, err)
			}
		}
		if p := s.Posted(one.ID, general, a.TS); len(p) != 1 || p[0].Token != one.BotToken || p[0].Text != "hi "+one.ID {
			t.Fatalf("workspace one: %+v", p)
		}
		if p := s.Posted(two.ID, general, b.TS); len(p) != 1 || p[0].Token != two.BotToken {
			t.Fatalf("workspace two: %+v", p)
		}
	})
}

func TestSend(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s)}})
		team := s.Team()
		root := team.Say(general, ann, "question")
		msg := abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, ThreadID: root.TS, ScopeID: team.ID}

		send := func(m abi.OutboundMessage) *abi.SendResult {
			t.Helper()
			res, err := h.Send("main", m)
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			return res
		}
		m := msg
		m.Text = "a <b> & c"
		if res := send(m); res.Error != nil || len(res.MessageIDs) != 1 {
			t.Fatalf("%+v", res)
		}
		if got := s.PostedTexts(team.ID, general, root.TS); len(got) != 1 || got[0] != "a &lt;b&gt; &amp; c" {
			t.Fatalf("thread holds %q", got)
		}
		// Longer than Slack's limit once escaped: split, nothing truncated.
		m.Text = strings.Repeat("&", 9000) + "\n" + strings.Repeat("x", 100) // 45,101 escaped
		res := send(m)
		if res.Error != nil || len(res.MessageIDs) != 2 {
			t.Fatalf("long text: %+v", res.Error)
		}
		var total int
		for _, p := range s.Posted(team.ID, general, root.TS)[1:] {
			if p.Truncated {
				t.Fatal("a part was truncated by Slack")
			}
			total += len(p.Text)
		}
		if total != 45000+1+100 {
			t.Fatalf("parts hold %d characters", total)
		}
		// A thread whose root cannot take replies: posted at the top level, once.
		sys := team.SystemMessage(general, "renamed the channel")
		m = msg
		m.ThreadID, m.Text = sys, "to the channel"
		if res := send(m); res.Error != nil {
			t.Fatalf("%+v", res.Error)
		}
		if got := s.PostedTexts(team.ID, general, "-"); len(got) != 1 || got[0] != "to the channel" {
			t.Fatalf("top level holds %q", got)
		}
		// Typing: an assistant thread shows a status; elsewhere nothing is sent.
		a := team.AssistantThreadStarted(ann, general)
		if res := send(abi.OutboundMessage{ChatID: team.AddDM(ann), ThreadID: a.TS, ScopeID: team.ID, Action: "typing"}); res.Error != nil {
			t.Fatalf("%+v", res.Error)
		}
		if res := send(abi.OutboundMessage{ChatID: general, Action: "typing"}); res.Error != nil {
			t.Fatalf("%+v", res.Error)
		}
		if st := s.Statuses(); len(st) != 1 || st[0].ThreadTS != a.TS || st[0].Channel != team.AddDM(ann) {
			t.Fatalf("statuses %+v", st)
		}
		// Edits.
		ids := send(abi.OutboundMessage{ChatID: general, Text: "v1"}).MessageIDs
		if res := send(abi.OutboundMessage{ChatID: general, EditMessageID: ids[0], Text: "v2"}); res.Error != nil {
			t.Fatalf("%+v", res.Error)
		}
		if p := s.Posted(team.ID, general, "-"); p[len(p)-1].Text != "v2" {
			t.Fatalf("edit: %+v", p[len(p)-1])
		}
	})
}

func TestSendErrors(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"main": profile(s)}})
		s.Team().AddForeignChannel("C0OTHER", "other")
		msg := abi.OutboundMessage{ChatID: general, Text: "hello"}
		count := func() int { return len(s.Requests("chat.postMessage")) }
		cases := []struct {
			name   string
			fault  *st.Fault
			msg    abi.OutboundMessage
			kind   string
			code   string
			posted bool
			retry  time.Duration // the retry_after_ms wanted (-1: not checked)
		}{
			{"429", ptr(st.RateLimited(7)), msg, abi.SendRetryable, "rate_limited", false, 7 * time.Second},
			{"429 without a number", ptr(st.RateLimitedHeader("soon")), msg, abi.SendRetryable, "rate_limited", false, defaultRetryAfter},
			{"429 Retry-After 0", ptr(st.RateLimitedHeader("0")), msg, abi.SendRetryable, "rate_limited", false, time.Second},
			// Issue 29, item 3: an HTTP 200 "ratelimited" honours its Retry-After (it waited 30 s),
			// and errors Slack documents as not executed are retryable at any status (a 503
			// service_unavailable was uncertain: never retried, never answered).
			{"200 ratelimited, Retry-After 1", ptr(st.RateLimited(1).WithStatus(200)), msg, abi.SendRetryable, "rate_limited", false, time.Second},
			{"200 rate_limited", ptr(st.Error("rate_limited").WithRetryAfter(3)), msg, abi.SendRetryable, "rate_limited", false, 3 * time.Second},
			{"503 service_unavailable", ptr(st.Error("service_unavailable").WithStatus(503)), msg, abi.SendRetryable, "service_unavailable", false, 0},
			{"503 service_unavailable, Retry-After 2", ptr(st.Error("service_unavailable").WithStatus(503).WithRetryAfter(2)), msg, abi.SendRetryable, "service_unavailable", false, 2 * time.Second},
			{"request_timeout", ptr(st.Error("request_timeout")), msg, abi.SendRetryable, "request_timeout", false, 0},
			{"team_added_to_org", ptr(st.Error("team_added_to_org")), msg, abi.SendRetryable, "team_added_to_org", false, 0},
			{"500 internal_error", ptr(st.Error("internal_error").WithStatus(500)), msg, abi.SendUncertain, "internal_error", false, -1},
			{"502 with another error", ptr(st.Error("channel_not_found").WithStatus(502)), msg, abi.SendUncertain, "server_error", false, -1},
			{"channel_not_found", nil, abi.OutboundMessage{ChatID: "C0NOPE", Text: "x"}, abi.SendPermanent, "channel_not_found", false, -1},
			{"not_in_channel", nil, abi.OutboundMessage{ChatID: "C0OTHER", Text: "x"}, abi.SendPermanent, "not_in_channel", false, -1},
			{"thread_not_found", nil, abi.OutboundMessage{ChatID: general, ThreadID: "1700000000.999999", Text: "x"}, abi.SendPermanent, "thread_not_found", false, -1},
			{"invalid_auth", ptr(st.Error("invalid_auth")), msg, abi.SendPermanent, "invalid_auth", false, -1},
			// Slack's front end answering without a Web API answer may have passed the request on.
			{"503 before, HTML", ptr(st.ServerError(503)), msg, abi.SendUncertain, "server_error", false, -1},
			{"fatal_error", ptr(st.Error("fatal_error")), msg, abi.SendUncertain, "fatal_error", false, -1},
			{"service_unavailable", ptr(st.Error("service_unavailable")), msg, abi.SendRetryable, "service_unavailable", false, 0},
			// Faults after the effect: posted, and the answer lost or unreadable.
			{"posted, then 502", ptr(st.AfterEffect(st.ServerError(502))), msg, abi.SendUncertain, "server_error", true, -1},
			{"posted, then reset", ptr(st.AfterEffect(st.ConnectionReset())), msg, abi.SendUncertain, "uncertain", true, -1},
			{"posted, then truncated", ptr(st.AfterEffect(st.Truncated())), msg, abi.SendUncertain, "", true, -1},
			{"posted, then not JSON", ptr(st.AfterEffect(st.Malformed())), msg, abi.SendUncertain, "unreadable_answer", true, -1},
			{"posted, then internal_error", ptr(st.AfterEffect(st.Error("internal_error"))), msg, abi.SendUncertain, "internal_error", true, -1},
		}
		for _, c := range cases {
			if c.fault != nil {
				s.InjectFault("chat.postMessage", *c.fault)
			}
			before, posted := count(), len(s.AllPosted())
			res, err := h.Send("main", c.msg)
			if err != nil || res.Error == nil {
				t.Errorf("%s: %+v %v", c.name, res, err)
				continue
			}
			e := res.Error
			if e.Kind != c.kind || (c.code != "" && e.Code != c.code) {
				t.Errorf("%s: %s/%s (%s), want %s/%s", c.name, e.Kind, e.Code, e.Message, c.kind, c.code)
			}
			if n := count() - before; n != 1 {
				t.Errorf("%s: %d requests, want 1 (no retry inside send)", c.name, n)
			}
			if got := len(s.AllPosted()) - posted; got != map[bool]int{true: 1}[c.posted] {
				t.Errorf("%s: %d posted", c.name, got)
			}
			if strings.Contains(e.Message, st.DefaultBotToken) {
				t.Errorf("%s: token leaked: %q", c.name, e.Message)
			}
			if c.retry >= 0 && e.RetryAfterMs != c.retry.Milliseconds() {
				t.Errorf("%s: retry_after_ms %d, want %d", c.name, e.RetryAfterMs, c.retry.Milliseconds())
			}
		}
		// An edit is safe to repeat: a 200 "ratelimited" waits its Retry-After too, and any
		// server trouble is retryable.
		posted, err := h.Send("main", msg)
		if err != nil || posted.Error != nil {
			t.Fatalf("post: %+v %v", posted, err)
		}
		edit := abi.OutboundMessage{ChatID: general, Text: "edited", EditMessageID: posted.MessageIDs[0]}
		for _, c := range []struct {
			fault st.Fault
			code  string
			retry time.Duration
		}{
			{st.RateLimited(1).WithStatus(200), "rate_limited", time.Second},
			{st.Error("service_unavailable").WithStatus(503), "service_unavailable", 0},
			{st.Error("internal_error").WithStatus(500).WithRetryAfter(4), "server_error", 4 * time.Second},
		} {
			s.InjectFault("chat.update", c.fault)
			res, err := h.Send("main", edit)
			if err != nil || res.Error == nil || res.Error.Kind != abi.SendRetryable || res.Error.Code != c.code ||
				res.Error.RetryAfterMs != c.retry.Milliseconds() {
				t.Errorf("chat.update %v: %+v %v", c.fault, res, err)
			}
		}
		if res, _ := h.Send("main", abi.OutboundMessage{ChatID: general, Text: "  "}); res.Error == nil || res.Error.Kind != abi.SendPermanent {
			t.Errorf("empty text: %+v", res)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// A send whose answer never comes times out inside the plugin (8 s), under the host's call
// deadline (10 s): it is uncertain, the instance survives, and nothing is resent.
func TestSendTimeoutUnderCallDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the plugin's 8 s request timeout")
	}
	s := st.New(t)
	s.Team().AddChannel(general, "general")
	h := newHost(t, "wasm", sdktest.Options{Profiles: map[string]any{"main": profile(s)}})
	s.InjectFault("chat.postMessage", st.NoAnswer())
	start := time.Now()
	res, err := h.Send("main", abi.OutboundMessage{ChatID: general, Text: "into the void"})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("send failed at the host (deadline?): %v after %v", err, took)
	}
	if res.Error == nil || res.Error.Kind != abi.SendUncertain {
		t.Fatalf("answer %+v", res.Error)
	}
	if took < httpTimeout-time.Second || took > 10*time.Second {
		t.Fatalf("took %v, want about the plugin's %v", took, httpTimeout)
	}
	if len(s.AllPosted()) != 1 || len(s.Requests("chat.postMessage")) != 1 {
		t.Fatalf("posted %d, requests %d", len(s.AllPosted()), len(s.Requests("chat.postMessage")))
	}
	// The same instance pool still serves.
	if res, err := h.Send("main", abi.OutboundMessage{ChatID: general, Text: "after"}); err != nil || res.Error != nil {
		t.Fatalf("after the timeout: %+v %v", res, err)
	}
	t.Logf("uncertain after %v", took.Round(time.Millisecond))
}

// dispatcher is a host's hermes_dispatch: durable deduplication by id, as the turn engine does.
type dispatcher struct {
	mu     sync.Mutex
	seen   map[string]int
	events []abi.InboundEvent
}

func (d *dispatcher) Dispatch(_ context.Context, _ sdktest.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[string]int{}
	}
	d.seen[ev.ID]++
	if d.seen[ev.ID] > 1 {
		return abi.DispatchReply{Duplicate: true}, nil
	}
	d.events = append(d.events, ev)
	return abi.DispatchReply{}, nil
}

func (d *dispatcher) got() []abi.InboundEvent {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]abi.InboundEvent(nil), d.events...)
}

func socketProfile(s *st.Server) map[string]any {
	return map[string]any{"bot_token": st.DefaultBotToken, "app_token": s.AppToken(), "mode": "socket", "api_base": s.APIURL()}
}

func TestSocketMode(t *testing.T) {
	each(t, func(t *testing.T, mode string, s *st.Server) {
		s.SetSocketMode(true)
		d := &dispatcher{}
		h := newHost(t, mode, sdktest.Options{Profiles: map[string]any{"sock": socketProfile(s)}, Dispatcher: d})
		team := s.Team()
		pollUntil := func(what string, cond func() bool) {
			t.Helper()
			for i := 0; i < 20 && !cond(); i++ {
				if _, err := h.Poll("sock", 300*time.Millisecond); err != nil {
					t.Fatalf("poll: %v", err)
				}
			}
			if !cond() {
				t.Fatalf("%s: frames %+v acks %+v", what, s.SocketFrames(), s.SocketAcks())
			}
		}
		m := team.Mention(general, ann, "over the socket")
		pollUntil("the mention acknowledged", func() bool { return s.Acked(m.EventIDs[0]) && s.Acked(m.EventIDs[1]) })
		if got := d.got(); len(got) != 1 || got[0].Text != "over the socket" || got[0].Source.ThreadID != m.TS {
			t.Fatalf("dispatched %+v", got)
		}
		// Acknowledged only after the dispatch: every ack follows the host's record.
		if d.seen["msg:"+team.ID+":"+general+":"+m.TS] != 2 {
			t.Fatalf("dispatches %v", d.seen)
		}

		// disconnect: the plugin reconnects with a fresh URL.
		s.Disconnect("warning", time.Second)
		pollUntil("a second connection", func() bool { n, opened := s.SocketConns(); return opened == 2 && n >= 1 })
		q := team.DM(ann, "after the reconnect")
		pollUntil("the DM acknowledged", func() bool { return s.Acked(q.EventIDs[0]) })

		// A connection cut after an event was sent but before its ack: resent on the next
		// connection, dispatched again, deduplicated.
		r := team.DM(ann, "cut mid-event")
		s.Wait(wait, func() bool {
			for _, f := range s.SocketFrames() {
				if f.EventID == r.EventIDs[0] {
					return true
				}
			}
			return false
		})
		s.DropSockets()
		pollUntil("the cut event acknowledged", func() bool { return s.Acked(r.EventIDs[0]) })
		if n := len(d.got()); n != 3 {
			t.Fatalf("%d distinct events dispatched, want 3: %+v", n, d.got())
		}
		if _, opened := s.SocketConns(); opened != 3 {
			t.Fatalf("%d connections opened, want 3", opened)
		}
	})
}

// Without hermes_dispatch (a bare host), events are returned from poll and acknowledged at the
// start of the next poll, once the host has recorded them.
func TestSocketModeReturnsEvents(t *testing.T) {
	s := st.New(t, st.WithAckTimeout(time.Minute))
	s.Team().AddUser(ann, "ann")
	s.SetSocketMode(true)
	h := newHost(t, "native", sdktest.Options{Profiles: map[string]any{"sock": socketProfile(s)}})
	p := s.Team().DM(ann, "hello")
	var got []abi.InboundEvent
	for i := 0; i < 10 && len(got) == 0; i++ {
		res, err := h.Poll("sock", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got = res.Events
	}
	if len(got) != 1 || got[0].Text != "hello" {
		t.Fatalf("events %+v", got)
	}
	if s.Acked(p.EventIDs[0]) {
		t.Fatal("acknowledged before the host recorded the event")
	}
	if _, err := h.Poll("sock", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitAcked(wait, p.EventIDs...); err != nil {
		t.Fatal(err)
	}
}

func TestConfigure(t *testing.T) {
	s := st.New(t)
	two := s.AddTeam("T0SECOND", "Second", "xoxb-2-second-workspace")
	h := newHost(t, "wasm", sdktest.Options{Profiles: map[string]any{
		"good":     profile(s),
		"revoked":  profile(s, "bot_token", "xoxb-revoked"),
		"misfiled": profile(s, "workspaces", map[string]any{"T0THIRD": map[string]any{"bot_token": two.BotToken}}),
	}})
	for prof, want := range map[string]string{"revoked": "rejected bot_token", "misfiled": "belongs to team T0SECOND"} {
		if _, err := h.Send(prof, abi.OutboundMessage{ChatID: general, Text: "x"}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", prof, err, want)
		}
	}
	if m := h.Manifest(); m.MessageLimit != (abi.MessageLimit{Max: ManifestLimit, Unit: abi.UnitCodePoint}) || m.Platform != "slack" ||
		!m.Has(abi.CapWebhook) || !m.Has(abi.CapThreads) {
		t.Fatalf("manifest %+v", m)
	}
}

func TestConfigProblems(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "bot_token is required"},
		{Config{BotToken: "xoxp-user"}, "does not look like"},
		{Config{BotToken: "xoxb-1", SigningSecret: "s", APIBase: "ftp://x"}, "api_base"},
		{Config{BotToken: "xoxb-1"}, "needs signing_secret"},
		{Config{BotToken: "xoxb-1", Mode: ModeSocket}, "app_token is required"},
		{Config{BotToken: "xoxb-1", Mode: "push", SigningSecret: "s"}, `mode "push"`},
		{Config{BotToken: "xoxb-1", SigningSecret: "s", BotUserID: "bot"}, "bot_user_id"},
		{Config{BotToken: "xoxb-1", SigningSecret: "s", Workspaces: map[string]Workspace{"team": {BotToken: "xoxb-2"}}}, "not a team id"},
	} {
		cfg := c.cfg
		if cfg.APIBase == "" {
			cfg.APIBase = DefaultAPIBase
		}
		if cfg.Mode == "" {
			cfg.Mode = ModeEvents
		}
		if p := strings.Join(cfg.problems(), "; "); !strings.Contains(p, c.want) {
			t.Errorf("%+v: problems %q, want %q", c.cfg, p, c.want)
		}
	}
}
