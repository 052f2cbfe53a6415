//go:build !wasip1

package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// wait bounds conditions that should hold at once; polls use a short long-poll, since the fake
// counts getUpdates timeouts in units of fakeSecond.
const (
	wait       = 20 * time.Second
	fakeSecond = 10 * time.Millisecond
	pollWait   = 2 * time.Second
)

// newHost starts the plugin natively or as Wasm against the given profiles. (These tests need
// the host, so this file builds only natively: the Wasm case is driven from here.)
func newHost(t *testing.T, mode string, profiles map[string]any, state *sdktest.State) sdktest.Host {
	t.Helper()
	o := sdktest.Options{Profiles: profiles, EgressExtra: []string{"127.0.0.1"}, State: state}
	if mode == "native" {
		return sdktest.Native(t, o)
	}
	return sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), o)
}

// each runs f natively and as Wasm, each time with a fresh fake.
func each(t *testing.T, f func(t *testing.T, mode string, tg *tgt.Server)) {
	for _, mode := range []string{"native", "wasm"} {
		t.Run(mode, func(t *testing.T) { f(t, mode, tgt.New(t, tgt.WithSecond(fakeSecond))) })
	}
}

// profile is a configuration pointing at the fake.
func profile(tg *tgt.Server, token string, extra ...any) map[string]any {
	cfg := map[string]any{"token": token, "api_base": tg.URL()}
	for i := 0; i+1 < len(extra); i += 2 {
		cfg[extra[i].(string)] = extra[i+1]
	}
	return cfg
}

func mustPoll(t *testing.T, h sdktest.Host, prof string) *abi.PollResult {
	t.Helper()
	res, err := h.Poll(prof, pollWait)
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	for i := range res.Events {
		checkEvent(t, &res.Events[i])
	}
	return res
}

func ids(evs []abi.InboundEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

func TestPollOffsetsSurviveRestart(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		bot := tg.Bot()
		state := sdktest.NewState(t)
		profiles := map[string]any{"main": profile(tg, bot.Token())}
		seen := map[string]int{}
		record := func(evs []abi.InboundEvent) {
			for _, e := range evs {
				seen[e.ID]++
			}
		}
		a := bot.PrivateText(ada, "one")
		b := bot.PrivateText(ada, "two")

		t.Run("first run", func(t *testing.T) {
			h := newHost(t, mode, profiles, state)
			res := mustPoll(t, h, "main")
			if got := ids(res.Events); len(got) != 2 || got[0] != "update:"+itoa(a.UpdateID) || got[1] != "update:"+itoa(b.UpdateID) {
				t.Fatalf("first batch %v", got)
			}
			record(res.Events)
			// Not confirmed to Telegram yet: the host has not recorded the batch.
			if bot.Confirmed() != 0 {
				t.Fatalf("batch confirmed before the next poll: %d", bot.Confirmed())
			}
			c := bot.PrivateText(ada, "three")
			res = mustPoll(t, h, "main")
			if got := ids(res.Events); len(got) != 1 || got[0] != "update:"+itoa(c.UpdateID) {
				t.Fatalf("second batch %v", got)
			}
			record(res.Events)
			if bot.Confirmed() != b.UpdateID {
				t.Fatalf("first batch not confirmed by the second poll: %d", bot.Confirmed())
			}
			// The host "crashes" here, after recording the second batch.
		})
		d := bot.PrivateText(ada, "four")
		t.Run("after restart", func(t *testing.T) {
			h := newHost(t, mode, profiles, state)
			res := mustPoll(t, h, "main")
			if got := ids(res.Events); len(got) != 1 || got[0] != "update:"+itoa(d.UpdateID) {
				t.Fatalf("after restart %v", got)
			}
			record(res.Events)
			res = mustPoll(t, h, "main")
			if len(res.Events) != 0 {
				t.Fatalf("replayed %v", ids(res.Events))
			}
			if bot.Confirmed() != d.UpdateID {
				t.Fatalf("confirmed %d, want %d", bot.Confirmed(), d.UpdateID)
			}
		})
		if len(seen) != 4 {
			t.Fatalf("lost updates: %v", seen)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("%s delivered %d times", id, n)
			}
		}
		for _, r := range tg.Requests("getUpdates", 0) {
			if r.Params["allowed_updates"] == "" || r.Params["limit"] != "100" {
				t.Fatalf("getUpdates params %v", r.Params)
			}
		}
	})
}

func TestPollDeletesStrayWebhook(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		bot := tg.Bot()
		resp, err := tg.Client().PostForm(tg.BotURL(bot.Token())+"/setWebhook", url.Values{"url": {"http://127.0.0.1:9/hook"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := newHost(t, mode, map[string]any{"main": profile(tg, bot.Token())}, nil)
		// No update is queued while the webhook is set: the fake would push it to the dead URL.
		res := mustPoll(t, h, "main")
		if len(res.Events) != 0 || len(tg.Requests("deleteWebhook", 0)) != 1 || bot.WebhookInfo().URL != "" {
			t.Fatalf("events %v, deleteWebhook calls %d", ids(res.Events), len(tg.Requests("deleteWebhook", 0)))
		}
		bot.PrivateText(ada, "hi")
		if res := mustPoll(t, h, "main"); len(res.Events) != 1 {
			t.Fatalf("after deleteWebhook: %v", ids(res.Events))
		}
	})
}

// The operator is told, at warn and once per webhook URL, which webhook poll mode deleted.
func TestStrayWebhookWarnsOnce(t *testing.T) {
	tg := tgt.New(t, tgt.WithSecond(fakeSecond))
	bot := tg.Bot()
	var logs lockedBuffer
	h := sdktest.Native(t, sdktest.Options{Profiles: map[string]any{"main": profile(tg, bot.Token())}, EgressExtra: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	stray := func(u string) {
		resp, err := tg.Client().PostForm(tg.BotURL(bot.Token())+"/setWebhook", url.Values{"url": {u}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		mustPoll(t, h, "main")
		if bot.WebhookInfo().URL != "" {
			t.Fatal("webhook not deleted")
		}
	}
	stray("http://127.0.0.1:9/other-deployment")
	stray("http://127.0.0.1:9/other-deployment")
	stray("http://127.0.0.1:9/third")
	out := logs.String()
	if n := strings.Count(out, "deleted the webhook"); n != 2 || !strings.Contains(out, "level=WARN") ||
		!strings.Contains(out, "other-deployment") || !strings.Contains(out, "/third") {
		t.Fatalf("%d warnings:\n%s", n, out)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestPollConflictBacksOff(t *testing.T) {
	for _, mode := range []string{"native", "wasm"} {
		t.Run(mode, func(t *testing.T) {
			tg := tgt.New(t) // real seconds: the plugin's long poll stays parked until terminated
			bot := tg.Bot()
			h := newHost(t, mode, map[string]any{"main": profile(tg, bot.Token())}, nil)
			done := make(chan *abi.PollResult, 1)
			go func() {
				res, err := h.Poll("main", 20*time.Second)
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			if err := bot.WaitPolling(wait); err != nil {
				t.Fatal(err)
			}
			resp, err := tg.Client().PostForm(tg.BotURL(bot.Token())+"/getUpdates", url.Values{"timeout": {"0"}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			select {
			case res := <-done:
				if res == nil || len(res.Events) != 0 || res.BackoffMs <= 0 {
					t.Fatalf("conflict answered %+v", res)
				}
			case <-time.After(wait):
				t.Fatal("poll not terminated by the competing getUpdates")
			}
		})
	}
}

func TestPollSkipsWhatIsNotForTheAgent(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		bot := tg.Bot()
		const group = -4001
		bot.BotText(group, tgt.Person(333, "Beep"), "@hermes_test_bot hi")
		bot.GroupText(group, ada, "/new@other_bot")
		bot.Inject(tgt.Update{Message: &tgt.Message{MessageID: 1, Chat: tgt.Chat{ID: 0, Type: "private"}}})
		last := bot.GroupText(group, ada, "chatter")
		h := newHost(t, mode, map[string]any{"main": profile(tg, bot.Token())}, nil)
		res := mustPoll(t, h, "main")
		if len(res.Events) != 1 || res.Events[0].Kind != abi.EventObserve {
			t.Fatalf("events %+v", res.Events)
		}
		mustPoll(t, h, "main")
		if bot.Confirmed() != last.UpdateID {
			t.Fatalf("skipped updates not confirmed: %d < %d", bot.Confirmed(), last.UpdateID)
		}
	})
}

// sendOK sends and fails the test unless the platform accepted the message.
func sendOK(t *testing.T, h sdktest.Host, msg abi.OutboundMessage) []string {
	t.Helper()
	res, err := h.Send("main", msg)
	if err != nil || res.Error != nil {
		t.Fatalf("send %+v: %+v %v", msg, res, err)
	}
	return res.MessageIDs
}

// sendErr sends and returns the typed failure, failing the test if there is none.
func sendErr(t *testing.T, h sdktest.Host, msg abi.OutboundMessage) *abi.SendError {
	t.Helper()
	res, err := h.Send("main", msg)
	if err != nil || res.Error == nil {
		t.Fatalf("send %+v: want a typed failure, got %+v %v", msg, res, err)
	}
	return res.Error
}

func TestSendTopicsAndReplies(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		forum, topics := tg.AddForum(-1001000000001, "Team", tgt.Topic{Name: "ops"})
		tg.AddPrivate(ada)
		h := newHost(t, mode, map[string]any{"main": profile(tg, tgt.DefaultToken)}, nil)
		chat, topic := itoa(forum.ID), itoa(topics[0])

		ids := sendOK(t, h, abi.OutboundMessage{ChatType: abi.ChatForum, ChatID: chat, ThreadID: topic, Text: "in topic"})
		if got := tg.SentTexts(forum.ID, topics[0]); len(got) != 1 || got[0] != "in topic" || len(ids) != 1 {
			t.Fatalf("topic transcript %q, ids %v", got, ids)
		}
		// General (thread 1) is omitted on sendMessage, kept for typing.
		sendOK(t, h, abi.OutboundMessage{ChatID: chat, ThreadID: "1", Text: "in general"})
		if got := tg.SentTexts(forum.ID, 0); len(got) != 1 {
			t.Fatalf("general transcript %q", got)
		}
		sendOK(t, h, abi.OutboundMessage{ChatID: chat, ThreadID: "1", Action: "typing"})
		if acts := tg.Actions(forum.ID); len(acts) != 1 || acts[0].Thread != 1 || acts[0].Action != "typing" {
			t.Fatalf("actions %+v", acts)
		}
		// A reply, and a reply to a message that is gone.
		sendOK(t, h, abi.OutboundMessage{ChatID: chat, ThreadID: topic, ReplyTo: ids[0], Text: "reply"})
		sendOK(t, h, abi.OutboundMessage{ChatID: "111", ReplyTo: "99999", Text: "orphan reply"})
		sent := tg.Sent(forum.ID, topics[0])
		if len(sent) != 2 || sent[1].Message.ReplyToMessage == nil || itoa(sent[1].Message.ReplyToMessage.MessageID) != ids[0] {
			t.Fatalf("reply not threaded: %+v", sent)
		}
		// Edits, including one that changes nothing.
		sendOK(t, h, abi.OutboundMessage{ChatID: chat, EditMessageID: ids[0], Text: "in topic, edited"})
		sendOK(t, h, abi.OutboundMessage{ChatID: chat, EditMessageID: ids[0], Text: "in topic, edited"})
		if m := tg.Sent(forum.ID, topics[0])[0]; m.Message.Text != "in topic, edited" || len(m.Edits) != 1 {
			t.Fatalf("edit: %+v", m)
		}
		// A topic that no longer exists: sent once more, without the thread, in the same call.
		before := len(tg.Requests("sendMessage", forum.ID))
		sendOK(t, h, abi.OutboundMessage{ChatID: chat, ThreadID: "4242", Text: "topic gone"})
		reqs := tg.Requests("sendMessage", forum.ID)[before:]
		if len(reqs) != 2 || reqs[0].Thread != 4242 || reqs[1].Thread != 0 || tg.SentTexts(forum.ID, 0)[1] != "topic gone" {
			t.Fatalf("thread-not-found retry: %+v", reqs)
		}
		for _, r := range tg.Requests("", 0) {
			if r.Params["parse_mode"] != "" {
				t.Fatalf("parse_mode sent: %v", r.Params)
			}
		}
	})
}

func TestSendErrors(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		tg.AddPrivate(ada)
		h := newHost(t, mode, map[string]any{"main": profile(tg, tgt.DefaultToken)}, nil)
		msg := abi.OutboundMessage{ChatID: "111", Text: "hello"}

		count := func() int { return len(tg.Requests("sendMessage", 0)) }
		cases := []struct {
			name  string
			fault tgt.Fault
			check func(e *abi.SendError) bool
		}{
			{"429", tgt.FloodWait(33), func(e *abi.SendError) bool {
				return e.Kind == abi.SendRetryable && e.RetryAfterMs == 33000 && e.Code == "rate_limited"
			}},
			{"migrated", tgt.Migrated(-1009999), func(e *abi.SendError) bool {
				return e.Kind == abi.SendPermanent && e.MigrateToChatID == "-1009999" && e.Code == "migrated"
			}},
			// A 5xx may follow the effect: the message may be posted, a resend could duplicate it.
			{"html 502", tgt.ServerError(502), func(e *abi.SendError) bool { return e.Kind == abi.SendUncertain }},
			{"json 500", tgt.APIError(500, "Internal Server Error").AfterEffect(), func(e *abi.SendError) bool { return e.Kind == abi.SendUncertain }},
			// The request reached Telegram before the reset: it may have been posted.
			{"connection reset", tgt.ConnectionReset(), func(e *abi.SendError) bool { return e.Kind == abi.SendUncertain }},
			{"reset after the effect", tgt.ConnectionReset().AfterEffect(), func(e *abi.SendError) bool { return e.Kind == abi.SendUncertain }},
			{"body cut short", tgt.TruncatedBody().AfterEffect(), func(e *abi.SendError) bool { return e.Kind == abi.SendUncertain }},
			{"blocked", tgt.APIError(403, "Forbidden: bot was blocked by the user"), func(e *abi.SendError) bool {
				return e.Kind == abi.SendPermanent && e.Code == "blocked" && strings.Contains(e.Message, "blocked by the user")
			}},
		}
		for _, c := range cases {
			tg.InjectFault("sendMessage", c.fault)
			before := count()
			e := sendErr(t, h, msg)
			if !c.check(e) {
				t.Errorf("%s: %+v", c.name, e)
			}
			if n := count() - before; n != 1 {
				t.Errorf("%s: %d requests, want 1 (no retry inside send)", c.name, n)
			}
			if strings.Contains(e.Message, tgt.DefaultToken) {
				t.Errorf("%s: token leaked in %q", c.name, e.Message)
			}
		}
		// A 200 whose body is unreadable: Telegram executed it. Success, without an id; posted once.
		tg.InjectFault("sendMessage", tgt.MalformedJSON().AfterEffect())
		before := len(tg.Sent(111, 0))
		if ids := sendOK(t, h, abi.OutboundMessage{ChatID: "111", Text: "cut answer"}); len(ids) != 0 {
			t.Errorf("ids %v from an unreadable answer", ids)
		}
		if n := len(tg.Sent(111, 0)) - before; n != 1 {
			t.Errorf("%d messages posted, want 1", n)
		}
		// An edit or a chat action is harmless to repeat: a 5xx there is retryable.
		tg.InjectFault("sendChatAction", tgt.ServerError(502))
		if e := sendErr(t, h, abi.OutboundMessage{ChatID: "111", Action: "typing"}); e.Kind != abi.SendRetryable {
			t.Errorf("typing under a 502: %+v", e)
		}
		// A migrated group, for real: the fake refuses the old id.
		tg.MigrateGroup(-4005, -1004005)
		if e := sendErr(t, h, abi.OutboundMessage{ChatID: "-4005", Text: "x"}); e.MigrateToChatID != "-1004005" || e.Kind != abi.SendPermanent {
			t.Fatalf("migrated group: %+v", e)
		}
		if e := sendErr(t, h, abi.OutboundMessage{ChatID: "-777", Text: "x"}); e.Kind != abi.SendPermanent || e.Code != "chat_not_found" {
			t.Fatalf("unknown chat: %+v", e)
		}

		// UTF-16 limit: 2048 emoji are 4096 units (sent); one more unit is refused unsent.
		before = count()
		sendOK(t, h, abi.OutboundMessage{ChatID: "111", Text: strings.Repeat("😀", 2048)})
		if e := sendErr(t, h, abi.OutboundMessage{ChatID: "111", Text: strings.Repeat("😀", 2048) + "!"}); e.Kind != abi.SendPermanent || e.Code != "message_too_long" {
			t.Fatalf("over the limit: %+v", e)
		}
		if e := sendErr(t, h, abi.OutboundMessage{ChatID: "111", Text: strings.Repeat("😀", 4000)}); e.Kind != abi.SendPermanent {
			t.Fatalf("4000 code points, 8000 units: %+v", e)
		}
		if n := count() - before; n != 1 {
			t.Fatalf("%d sendMessage requests, want only the one within the limit", n)
		}
		if e := sendErr(t, h, abi.OutboundMessage{ChatID: "111", Action: "record_video"}); e.Kind != abi.SendPermanent {
			t.Fatalf("unsupported action: %+v", e)
		}
	})
}

func TestProfilesUseTheirOwnToken(t *testing.T) {
	const token2 = "987654321:BBF-second-bot"
	for _, mode := range []string{"native", "wasm"} {
		t.Run(mode, func(t *testing.T) {
			tg := tgt.New(t, tgt.WithSecond(fakeSecond), tgt.WithBot(token2, "second_bot"))
			tg.AddPrivate(ada)
			one, two := tg.Bot(), tg.BotByToken(token2)
			one.PrivateText(ada, "for one")
			two.PrivateText(ada, "for two")
			h := newHost(t, mode, map[string]any{"main": profile(tg, one.Token()), "work": profile(tg, token2)}, nil)
			for prof, want := range map[string]string{"main": "for one", "work": "for two"} {
				res, err := h.Poll(prof, pollWait)
				if err != nil || len(res.Events) != 1 || res.Events[0].Text != want {
					t.Fatalf("%s polled %+v %v", prof, res, err)
				}
			}
			if _, err := h.Send("work", abi.OutboundMessage{ChatID: "111", Text: "from two"}); err != nil {
				t.Fatal(err)
			}
			sent := tg.Sent(111, 0)
			if len(sent) != 1 || sent[0].Token != token2 {
				t.Fatalf("sent %+v", sent)
			}
			polled := map[string]bool{}
			for _, r := range tg.Requests("getUpdates", 0) {
				polled[r.Token] = true
			}
			if len(polled) != 2 || !polled[one.Token()] || !polled[token2] {
				t.Fatalf("getUpdates tokens %v", polled)
			}
		})
	}
}

// forwarder is the host's /hooks/telegram/{profile}: it hands Telegram's pushes to the
// plugin's webhook export and keeps the events.
type forwarder struct {
	h       sdktest.Host
	profile string
	mu      sync.Mutex
	events  []abi.InboundEvent
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	res, err := f.h.Webhook(f.profile, abi.WebhookRequest{Method: r.Method, Path: r.URL.Path, Headers: r.Header, Body: body})
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	f.mu.Lock()
	f.events = append(f.events, res.Events...)
	f.mu.Unlock()
	w.WriteHeader(res.Response.Status)
	w.Write(res.Response.Body)
}

func (f *forwarder) got() []abi.InboundEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]abi.InboundEvent(nil), f.events...)
}

func TestWebhook(t *testing.T) {
	each(t, func(t *testing.T, mode string, tg *tgt.Server) {
		bot := tg.Bot()
		fw := &forwarder{profile: "hook"}
		srv := httptest.NewServer(fw)
		defer srv.Close()
		h := newHost(t, mode, map[string]any{
			"hook": profile(tg, bot.Token(), "mode", "webhook", "webhook_url", srv.URL+"/hooks/telegram/hook", "secret_token", "s3cr3t-T0ken"),
		}, nil)
		fw.h = h

		// Direct calls: no header, a wrong one, a GET.
		body := []byte(`{"update_id": 5, "message": {"message_id": 1, "date": 1, "text": "direct",
		  "chat": {"id": 111, "type": "private"}, "from": {"id": 111, "first_name": "Ada"}}}`)
		for _, c := range []struct {
			req    abi.WebhookRequest
			status int
		}{
			{abi.WebhookRequest{Method: "POST", Body: body}, 401},
			{abi.WebhookRequest{Method: "POST", Body: body, Headers: map[string][]string{SecretHeader: {"nope"}}}, 403},
			{abi.WebhookRequest{Method: "GET", Headers: map[string][]string{SecretHeader: {"s3cr3t-T0ken"}}}, 405},
			{abi.WebhookRequest{Method: "POST", Body: []byte("{oops"), Headers: map[string][]string{"x-telegram-bot-api-secret-token": {"s3cr3t-T0ken"}}}, 400},
			{abi.WebhookRequest{Method: "POST", Body: body, Headers: map[string][]string{"x-telegram-bot-api-secret-token": {"s3cr3t-T0ken"}}}, 200},
		} {
			res, err := h.Webhook("hook", c.req)
			if err != nil || res.Response.Status != c.status || (c.status != 200) != (len(res.Events) == 0) {
				t.Fatalf("%s %v: %+v %v", c.req.Method, c.req.Headers, res, err)
			}
		}

		// Poll in webhook mode registers the webhook once, with the secret.
		for i := 0; i < 2; i++ {
			res, err := h.Poll("hook", pollWait)
			if err != nil || len(res.Events) != 0 || res.BackoffMs <= 0 {
				t.Fatalf("webhook-mode poll: %+v %v", res, err)
			}
		}
		sets := tg.Requests("setWebhook", 0)
		if len(sets) != 1 || sets[0].Params["secret_token"] != "s3cr3t-T0ken" || sets[0].Params["url"] != srv.URL+"/hooks/telegram/hook" {
			t.Fatalf("setWebhook calls %+v", sets)
		}
		if len(tg.Requests("getUpdates", 0)) != 0 {
			t.Fatal("webhook mode called getUpdates")
		}

		// Telegram pushes: accepted with the secret, refused without it or with another.
		u := bot.MentionText(-4010, ada, "pushed")
		if err := tg.Wait(wait, func() bool { return len(fw.got()) == 1 }); err != nil {
			t.Fatalf("push not received: %v (deliveries %+v)", err, bot.Deliveries())
		}
		if ev := fw.got()[0]; ev.ID != "update:"+itoa(u.UpdateID) || ev.Text != "pushed" || ev.Kind != abi.EventMessage {
			t.Fatalf("pushed event %+v", ev)
		}
		for m, status := range map[tgt.SecretMode]int{tgt.SecretWrong: 403, tgt.SecretMissing: 401} {
			bot.SetWebhookSecretMode(m)
			n := len(bot.Deliveries())
			bot.PrivateText(ada, "forged")
			d, err := bot.WaitDeliveries(n+1, wait)
			if err != nil || d[n].Status != status {
				t.Fatalf("secret mode %v: %+v %v", m, d, err)
			}
		}
		if err := tg.Wait(wait, func() bool { return len(bot.Pending()) == 0 }); err != nil {
			t.Fatal(err)
		}
		if got := fw.got(); len(got) != 1 {
			t.Fatalf("forged pushes produced events: %+v", got)
		}
	})
}

func TestConfigProblems(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "token is required"},
		{Config{Token: "no colon"}, "does not look like"},
		{Config{Token: "1:a", APIBase: "ftp://x"}, "api_base"},
		{Config{Token: "1:a", Mode: "push"}, `mode "push"`},
		{Config{Token: "1:a", Mode: ModeWebhook, SecretToken: "s"}, "webhook_url"},
		{Config{Token: "1:a", Mode: ModeWebhook, WebhookURL: "https://x/hooks/telegram/main"}, "needs secret_token"},
		{Config{Token: "1:a", SecretToken: "bad secret!"}, "secret_token must be"},
		{Config{Token: "1:a", BotUsername: "no spaces"}, "bot_username"},
	} {
		cfg := c.cfg
		if cfg.APIBase == "" {
			cfg.APIBase = DefaultAPIBase
		}
		if cfg.Mode == "" {
			cfg.Mode = ModePoll
		}
		if p := strings.Join(cfg.problems(), "; "); !strings.Contains(p, c.want) {
			t.Errorf("%+v: problems %q, want %q", c.cfg, p, c.want)
		}
	}
	ok := Config{Token: tgt.DefaultToken, APIBase: DefaultAPIBase, Mode: ModeWebhook, WebhookURL: "https://h/hooks/telegram/main", SecretToken: "abc_DEF-1"}
	if p := ok.problems(); len(p) != 0 {
		t.Fatalf("valid config: %q", p)
	}
}

// Configure runs at load (Wasm host): a token Telegram rejects disables the profile.
func TestConfigureRejectsRevokedToken(t *testing.T) {
	tg := tgt.New(t)
	h := newHost(t, "wasm", map[string]any{
		"good":    profile(tg, tgt.DefaultToken),
		"revoked": profile(tg, "555:revoked"),
	}, nil)
	if _, err := h.Send("revoked", abi.OutboundMessage{ChatID: "1", Text: "x"}); err == nil || !strings.Contains(err.Error(), "rejected the token") {
		t.Fatalf("revoked profile: %v", err)
	}
	if len(tg.Requests("getMe", 0)) != 2 {
		t.Fatalf("getMe calls: %d", len(tg.Requests("getMe", 0)))
	}
	if m := h.Manifest(); m.MessageLimit != (abi.MessageLimit{Max: 4096, Unit: abi.UnitUTF16}) || !m.Has(abi.CapEdit) || m.Platform != "telegram" {
		t.Fatalf("manifest %+v", m)
	}
}
