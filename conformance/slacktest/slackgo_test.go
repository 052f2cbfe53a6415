package slacktest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

// These tests check the fake against slack-go (github.com/slack-go/slack), a client written
// against the real Slack: what the fake sends, slack-go must accept as Slack's; what the fake
// answers, slack-go must read as Slack's answer.

const wait = 10 * time.Second

// receiver is an Events API Request URL built the way slack-go's documentation builds one:
// SecretsVerifier over the raw body, then slackevents.ParseEvent.
type receiver struct {
	secret string
	mu     sync.Mutex
	events []slackevents.EventsAPIEvent
	errs   []error
	status func(n int) int // the status of the n-th accepted request (default 200)
	delay  func(n int) time.Duration
	n      int
}

func (rv *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sv, err := slack.NewSecretsVerifier(r.Header, rv.secret)
	if err == nil {
		sv.Write(body)
		err = sv.Ensure()
	}
	rv.mu.Lock()
	if err != nil {
		rv.errs = append(rv.errs, err)
		rv.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		rv.errs = append(rv.errs, err)
		rv.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	n := rv.n
	rv.n++
	rv.events = append(rv.events, ev)
	rv.mu.Unlock()
	if rv.delay != nil {
		time.Sleep(rv.delay(n))
	}
	if ev.Type == slackevents.URLVerification {
		var c slackevents.ChallengeResponse
		json.Unmarshal(body, &c)
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(c.Challenge))
		return
	}
	status := 200
	if rv.status != nil {
		status = rv.status(n)
	}
	w.WriteHeader(status)
}

func (rv *receiver) got() ([]slackevents.EventsAPIEvent, []error) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]slackevents.EventsAPIEvent(nil), rv.events...), append([]error(nil), rv.errs...)
}

func newReceiver(t *testing.T, s *Server, rv *receiver) {
	rv.secret = s.SigningSecret()
	hs := httptest.NewServer(rv)
	t.Cleanup(hs.Close)
	s.SetRequestURL(hs.URL + "/hooks/slack/main")
}

func TestSignedEventsAcceptedBySlackGo(t *testing.T) {
	s := New(t)
	team := s.Team()
	ch := team.AddChannel("C0GENERAL", "general")
	ann := team.AddUser("U0ANN", "ann")
	rv := &receiver{}
	newReceiver(t, s, rv)

	if _, err := s.VerifyURL(); err != nil {
		t.Fatalf("url_verification through slack-go's parser: %v", err)
	}
	m := team.Mention(ch, ann, "hello there")
	r := team.Reply(ch, m.TS, ann, "in the thread")
	a := team.AssistantThreadStarted(ann, ch)
	ids := append(append(m.EventIDs, r.EventIDs...), a.EventIDs...)
	if err := s.WaitAcked(wait, ids...); err != nil {
		t.Fatal(err)
	}
	events, errs := rv.got()
	if len(errs) > 0 {
		t.Fatalf("slack-go refused the fake's requests: %v", errs)
	}
	kinds := map[string]int{}
	for _, ev := range events {
		if ev.Type == slackevents.URLVerification {
			kinds["url_verification"]++
			continue
		}
		switch in := ev.InnerEvent.Data.(type) {
		case *slackevents.MessageEvent:
			kinds["message"]++
			if in.TimeStamp == r.TS && (in.ThreadTimeStamp != m.TS || in.Text != "in the thread") {
				t.Errorf("thread reply parsed as %+v", in)
			}
			if in.TimeStamp == m.TS && (in.ChannelType != "channel" || in.User != ann) {
				t.Errorf("message parsed as %+v", in)
			}
		case *slackevents.AppMentionEvent:
			kinds["app_mention"]++
			if in.TimeStamp != m.TS || !strings.HasPrefix(in.Text, "<@"+team.BotUser+">") || in.Channel != ch {
				t.Errorf("app_mention parsed as %+v", in)
			}
		case *slackevents.AssistantThreadStartedEvent:
			kinds["assistant_thread_started"]++
			if in.AssistantThread.ChannelID != team.AddDM(ann) || in.AssistantThread.ThreadTimeStamp != a.TS ||
				in.AssistantThread.Context.ChannelID != ch {
				t.Errorf("assistant thread parsed as %+v", in.AssistantThread)
			}
		default:
			t.Errorf("unexpected inner event %T", in)
		}
		if cb, ok := ev.Data.(*slackevents.EventsAPICallbackEvent); ok && (cb.TeamID != team.ID || cb.EventID == "") {
			t.Errorf("envelope %+v", cb)
		}
	}
	if kinds["url_verification"] != 1 || kinds["message"] != 2 || kinds["app_mention"] != 1 || kinds["assistant_thread_started"] != 1 {
		t.Fatalf("parsed %v", kinds)
	}
}

func TestForgeriesRefusedBySlackGo(t *testing.T) {
	s := New(t)
	team := s.Team()
	ch := team.AddChannel("C0GENERAL", "general")
	rv := &receiver{}
	newReceiver(t, s, rv)
	env := team.Envelope(Event{Type: "message", User: "U0ANN", Text: "forged", Channel: ch, ChannelType: "channel", TS: "1700000000.000001"})
	for _, f := range Forgeries() {
		d, err := s.Forge(f, env)
		if err != nil || d.Status != http.StatusUnauthorized {
			t.Errorf("%v: slack-go's verifier answered %d %v (want 401)", f, d.Status, err)
		}
	}
	if events, _ := rv.got(); len(events) != 0 {
		t.Fatalf("forgeries parsed: %d", len(events))
	}
	for _, d := range s.Deliveries("") {
		if d.Attempt != 0 {
			t.Fatalf("a forgery was retried: %+v", d)
		}
	}
}

func TestRetrySchedule(t *testing.T) {
	s := New(t, WithAckTimeout(300*time.Millisecond), WithRetrySchedule(0, 50*time.Millisecond, 100*time.Millisecond))
	team := s.Team()
	ch := team.AddChannel("C0GENERAL", "general")
	rv := &receiver{
		status: func(n int) int {
			if n == 0 {
				return 500
			}
			return 200
		},
		delay: func(n int) time.Duration {
			if n == 1 {
				return time.Second // past the ack timeout
			}
			return 0
		},
	}
	newReceiver(t, s, rv)
	p := team.Say(ch, "U0ANN", "retry me")
	if err := s.WaitAcked(wait, p.EventIDs...); err != nil {
		t.Fatal(err)
	}
	ds := s.Deliveries(p.EventIDs[0])
	if len(ds) != 3 || ds[0].Status != 500 || ds[1].Reason != "http_error" || ds[1].Attempt != 1 ||
		ds[1].Status != 0 || ds[2].Reason != "http_timeout" || ds[2].Attempt != 2 || !ds[2].OK() {
		t.Fatalf("deliveries %+v", ds)
	}
	events, _ := rv.got()
	for _, ev := range events {
		if cb := ev.Data.(*slackevents.EventsAPICallbackEvent); cb.EventID != p.EventIDs[0] {
			t.Fatalf("a retry changed the event id: %s", cb.EventID)
		}
	}

	// X-Slack-No-Retry stops the retries; an app that never acks is given up on.
	stop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderNoRetry, "1")
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer stop.Close()
	s.SetRequestURL(stop.URL)
	q := team.Say(ch, "U0ANN", "refused")
	if err := s.Wait(wait, func() bool { return s.GaveUp(q.EventIDs[0]) }); err != nil {
		t.Fatal(err)
	}
	if ds := s.Deliveries(q.EventIDs[0]); len(ds) != 1 || !ds[0].NoRetry {
		t.Fatalf("X-Slack-No-Retry not honoured: %+v", ds)
	}
}

func TestWebAPIAgreesWithSlackGo(t *testing.T) {
	s := New(t)
	team := s.Team()
	ch := team.AddChannel("C0GENERAL", "general")
	foreign := team.AddForeignChannel("C0OTHER", "other")
	api := slack.New(team.BotToken, slack.OptionAPIURL(s.APIURL()+"/"))

	auth, err := api.AuthTest()
	if err != nil || auth.TeamID != team.ID || auth.UserID != team.BotUser || auth.BotID != team.BotID {
		t.Fatalf("auth.test: %+v %v", auth, err)
	}
	root := team.Say(ch, "U0ANN", "question")
	gotCh, ts, err := api.PostMessage(ch, slack.MsgOptionText("answer", false), slack.MsgOptionTS(root.TS))
	if err != nil || gotCh != ch || ts == "" {
		t.Fatalf("chat.postMessage: %q %q %v", gotCh, ts, err)
	}
	if got := s.PostedTexts(team.ID, ch, root.TS); len(got) != 1 || got[0] != "answer" {
		t.Fatalf("thread holds %q", got)
	}

	for _, c := range []struct {
		channel, thread, code string
	}{
		{"C0NOPE", "", "channel_not_found"},
		{foreign, "", "not_in_channel"},
		{ch, "1700000000.999999", "thread_not_found"},
		{ch, "0", "invalid_thread_ts"},
		{ch, team.SystemMessage(ch, "renamed the channel"), "cannot_reply_to_message"},
	} {
		opts := []slack.MsgOption{slack.MsgOptionText("x", false)}
		if c.thread != "" {
			opts = append(opts, slack.MsgOptionTS(c.thread))
		}
		_, _, err := api.PostMessage(c.channel, opts...)
		var se slack.SlackErrorResponse
		if !errors.As(err, &se) || se.Err != c.code {
			t.Errorf("%s/%s: %v, want %s", c.channel, c.thread, err, c.code)
		}
	}
	if _, _, err := slack.New("xoxb-unknown", slack.OptionAPIURL(s.APIURL()+"/")).PostMessage(ch, slack.MsgOptionText("x", false)); err == nil || err.Error() != "invalid_auth" {
		t.Errorf("unknown token: %v", err)
	}

	// 429: slack-go reads Retry-After as integer seconds.
	s.InjectFault("chat.postMessage", RateLimited(7))
	_, _, err = api.PostMessage(ch, slack.MsgOptionText("x", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Fatalf("429: %v", err)
	}
	// An HTTP 200 "ratelimited" with Retry-After: slack-go reads the Web API error (its retry
	// handler reads Retry-After from a 429 only); the header is on the answer for a client that
	// honours it. A 503 whose body says service_unavailable: slack-go reports the status (it does
	// not read a non-200 body) and calls it retryable; the message was not posted.
	before := len(s.AllPosted())
	s.InjectFault("chat.postMessage", RateLimited(1).WithStatus(http.StatusOK),
		Error("service_unavailable").WithStatus(http.StatusServiceUnavailable))
	_, _, err = api.PostMessage(ch, slack.MsgOptionText("x", false))
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) || se.Err != "ratelimited" {
		t.Fatalf("200 ratelimited: %v", err)
	}
	_, _, err = api.PostMessage(ch, slack.MsgOptionText("x", false))
	var sc slack.StatusCodeError
	if !errors.As(err, &sc) || sc.Code != 503 || !sc.Retryable() {
		t.Fatalf("503 service_unavailable: %v", err)
	}
	reqs := s.Requests("chat.postMessage")
	if r := reqs[len(reqs)-2]; r.Status != 200 || r.Error != "ratelimited" {
		t.Fatalf("200 ratelimited recorded as %+v", r)
	}
	if r := reqs[len(reqs)-1]; r.Status != 503 || r.Error != "service_unavailable" {
		t.Fatalf("503 service_unavailable recorded as %+v", r)
	}
	if len(s.AllPosted()) != before {
		t.Fatal("a refused request posted")
	}
	// The raw answers, as a client that honours Retry-After reads them.
	for _, c := range []struct {
		f      Fault
		status int
		body   string
		retry  string
	}{
		{RateLimited(1).WithStatus(http.StatusOK), 200, `{"error":"ratelimited","ok":false}`, "1"},
		{Error("service_unavailable").WithStatus(503).WithRetryAfter(2), 503, `{"error":"service_unavailable","ok":false}`, "2"},
	} {
		s.InjectFault("chat.postMessage", c.f)
		req, _ := http.NewRequest("POST", s.APIURL()+"/chat.postMessage", strings.NewReader(`{"channel":"`+ch+`","text":"x"}`))
		req.Header.Set("Authorization", "Bearer "+team.BotToken)
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || strings.TrimSpace(string(body)) != c.body || resp.Header.Get("Retry-After") != c.retry {
			t.Errorf("%v: %d %s Retry-After %q", c.f, resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
	}

	// The limiter, too.
	limited := New(t, WithRateLimits(RateLimits{Burst: 1, Every: 3 * time.Second}))
	lt := limited.Team()
	lch := lt.AddChannel("C0GENERAL", "general")
	lapi := slack.New(lt.BotToken, slack.OptionAPIURL(limited.APIURL()+"/"))
	if _, _, err := lapi.PostMessage(lch, slack.MsgOptionText("first", false)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lapi.PostMessage(lch, slack.MsgOptionText("second", false)); !errors.As(err, &rl) || rl.RetryAfter < time.Second || rl.RetryAfter > 3*time.Second {
		t.Fatalf("limiter: %v", err)
	}

	// 5xx: slack-go reports the status and ignores the HTML body. After the effect, the message
	// is posted all the same.
	before = len(s.AllPosted())
	s.InjectFault("chat.postMessage", ServerError(503), AfterEffect(ServerError(502)))
	_, _, err = api.PostMessage(ch, slack.MsgOptionText("lost", false))
	if !errors.As(err, &sc) || sc.Code != 503 {
		t.Fatalf("503: %v", err)
	}
	_, _, err = api.PostMessage(ch, slack.MsgOptionText("posted anyway", false))
	if !errors.As(err, &sc) || sc.Code != 502 {
		t.Fatalf("502 after effect: %v", err)
	}
	if got := s.AllPosted()[before:]; len(got) != 1 || got[0].Text != "posted anyway" {
		t.Fatalf("posted %+v", got)
	}
	for _, f := range []Fault{AfterEffect(ConnectionReset()), AfterEffect(Truncated()), AfterEffect(Malformed())} {
		s.InjectFault("chat.postMessage", f)
		n := len(s.AllPosted())
		if _, _, err := api.PostMessage(ch, slack.MsgOptionText(f.String(), false)); err == nil {
			t.Errorf("%v: no error", f)
		}
		if len(s.AllPosted()) != n+1 {
			t.Errorf("%v: not posted", f)
		}
	}

	// Assistant threads (JSON bodies).
	a := team.AssistantThreadStarted("U0ANN", ch)
	dm := team.AddDM("U0ANN")
	if err := api.SetAssistantThreadsStatus(slack.AssistantThreadsSetStatusParameters{ChannelID: dm, ThreadTS: a.TS, Status: "is thinking..."}); err != nil {
		t.Fatal(err)
	}
	err = api.SetAssistantThreadsStatus(slack.AssistantThreadsSetStatusParameters{ThreadTS: a.TS, Status: "x"})
	if !errors.As(err, &se) || se.Err != "invalid_arguments" {
		t.Fatalf("setStatus without channel_id: %v", err)
	}
	if st := s.Statuses(); len(st) != 1 || st[0].Channel != dm || st[0].ThreadTS != a.TS || st[0].Status != "is thinking..." {
		t.Fatalf("statuses %+v", st)
	}
}

func TestSocketModeWithSlackGo(t *testing.T) {
	s := New(t, WithAckTimeout(500*time.Millisecond), WithRetrySchedule(0, 0, 0))
	s.SetSocketMode(true)
	team := s.Team()
	ch := team.AddChannel("C0GENERAL", "general")
	api := slack.New(team.BotToken, slack.OptionAPIURL(s.APIURL()+"/"), slack.OptionAppLevelToken(s.AppToken()))
	client := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- client.RunContext(ctx) }()

	var mu sync.Mutex
	var seen []string // event ids, in order of arrival (acked or not)
	ackFirst := false
	go func() {
		for evt := range client.Events {
			if evt.Type != socketmode.EventTypeEventsAPI {
				continue
			}
			cb := evt.Data.(slackevents.EventsAPIEvent).Data.(*slackevents.EventsAPICallbackEvent)
			mu.Lock()
			seen = append(seen, cb.EventID)
			ack := ackFirst || len(seen) > 1
			mu.Unlock()
			if ack {
				client.Ack(*evt.Request)
			}
		}
	}()
	if err := s.Wait(wait, func() bool { n, _ := s.SocketConns(); return n == 1 }); err != nil {
		t.Fatalf("%v: requests %+v", err, s.Requests(""))
	}
	// The first delivery is not acknowledged: the fake sends it again with retry_attempt 1.
	p := team.Say(ch, "U0ANN", "over the socket")
	if err := s.WaitAcked(wait, p.EventIDs...); err != nil {
		t.Fatalf("%v: frames %+v acks %+v requests %+v", err, s.SocketFrames(), s.SocketAcks(), s.Requests(""))
	}
	var attempts []int
	for _, f := range s.SocketFrames() {
		if f.EventID == p.EventIDs[0] {
			attempts = append(attempts, f.RetryAttempt)
		}
	}
	if len(attempts) != 2 || attempts[1] != 1 {
		t.Fatalf("events_api frames for the event: retry attempts %v; frames %+v acks %+v seen %v", attempts, s.SocketFrames(), s.SocketAcks(), seen)
	}

	// disconnect: slack-go reconnects with a fresh apps.connections.open URL.
	mu.Lock()
	ackFirst = true
	mu.Unlock()
	s.Disconnect("warning", 100*time.Millisecond)
	if err := s.Wait(wait, func() bool { n, opened := s.SocketConns(); return n == 1 && opened == 2 }); err != nil {
		t.Fatal(err)
	}
	q := team.Say(ch, "U0ANN", "after the reconnect")
	if err := s.WaitAcked(wait, q.EventIDs...); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Requests("apps.connections.open")); n != 2 {
		t.Fatalf("apps.connections.open called %d times", n)
	}
	if r := s.Requests("apps.connections.open")[0]; r.Header["Authorization"][0] != "Bearer "+s.AppToken() {
		t.Fatalf("app token not in the Authorization header: %v", r.Header)
	}
	cancel()
	select {
	case <-runDone:
	case <-time.After(wait):
		t.Fatal("socketmode client did not stop")
	}
}
