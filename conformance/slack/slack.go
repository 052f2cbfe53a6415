// Package slack is the Slack profile of the conformance suite. It loads a Slack adapter (.wasm)
// through the production runtime, points its profiles at slacktest fakes, and checks the
// behaviours adapters tend to get wrong: request signing (every forgery refused), url_verification,
// Slack's retries and the message + app_mention double delivery as one event, workspaces in the
// session scope, threads and mention gating, its own messages skipped, replies into the thread,
// long text split rather than truncated, 429 and HTTP 200 "ratelimited" with Retry-After, errors
// Slack documents as not executed (a 503 service_unavailable) retryable, answers lost after the
// message was posted reported as uncertain (never resent), a request timeout under the call
// deadline, and in
// Socket Mode acknowledgement only after the host recorded the event, and reconnection. An
// adapter with capability "attachments" is checked for files in (an attachment fetched with
// its workspace's token, too_large past max_bytes) and out (the upload flow, uncertain after the
// share); one with "buttons" for Block Kit buttons and signed presses (forgeries refused).
//
// The adapter is configured with the first-party plugin's configuration keys, which a Slack
// adapter must accept to be checked: bot_token, signing_secret, api_base, workspaces ({team id:
// {bot_token}}), and for Socket Mode mode="socket" and app_token. It must learn the bot's user
// id from the events (authorizations) or auth.test.
package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance"
	st "github.com/hermes-host/hermes-host/conformance/slacktest"
	"github.com/hermes-host/hermes-host/host"
)

// Options tune a run.
type Options struct {
	// CallTimeout bounds each call into the plugin (default: the host's default, 10s, which the
	// timeout check relies on).
	CallTimeout time.Duration
	// CacheDir is the compilation cache; empty uses the user cache directory.
	CacheDir string
	// Timeout bounds every wait for the fake or the plugin (default 20s).
	Timeout time.Duration
}

// Profiles of the suite.
const (
	profEvents = "events" // Events API over HTTP, two workspaces
	profSocket = "socket" // Socket Mode, on its own fake
)

// The workspaces and people of the suite.
const (
	secondTeam  = "T0SECOND01"
	secondToken = "xoxb-2000000002-3000000002-conformancesecond"
	general     = "C0GENERAL1"
	ann         = "U0ANN00001"
	bob         = "U0BOB00001"
)

// suite is one run's state.
type suite struct {
	ctx    context.Context
	opts   Options
	path   string
	rep    *conformance.Report
	slack  *st.Server // events mode
	sock   *st.Server // Socket Mode
	env    *host.Env
	p      *host.Plugin
	hook   *forwarder
	record *recorder
	checks conformance.Checks

	offSend *conformance.OffSend // message-posting calls that reached Slack from another export than send
}

// Run checks the Slack adapter at wasmPath against fake Slacks and reports each behaviour as a
// result. It never panics: a failure inside a check is that check's result.
func Run(ctx context.Context, wasmPath string, opts Options) *conformance.Report {
	if opts.Timeout <= 0 {
		opts.Timeout = 20 * time.Second
	}
	s := &suite{ctx: ctx, opts: opts, path: wasmPath, rep: &conformance.Report{File: wasmPath}, record: &recorder{}}
	s.checks = conformance.Checks{Report: s.rep}
	// Short retries: a retry the adapter must absorb comes at once, not after a minute.
	s.slack = st.New(nil, st.WithRetrySchedule(0, 200*time.Millisecond, 200*time.Millisecond))
	defer s.slack.Close()
	s.sock = st.New(nil, st.WithAckTimeout(time.Second), st.WithRetrySchedule(0, 0, 0))
	defer s.sock.Close()
	s.sock.SetSocketMode(true)
	for _, f := range []*st.Server{s.slack, s.sock} {
		one := f.Team()
		one.AddChannel(general, "general")
		one.AddUser(ann, "ann")
		one.AddUser(bob, "bob")
		two := f.AddTeam(secondTeam, "Second", secondToken)
		two.AddChannel(general, "general") // the same channel id in another workspace
		two.AddUser(ann, "ann")
	}
	s.hook = &forwarder{suite: s}
	hs := httptest.NewServer(s.hook)
	defer hs.Close()
	s.slack.SetRequestURL(hs.URL + "/hooks/slack/" + profEvents)

	s.offSend = conformance.NewOffSend("Slack", postingMethod)
	env, err := host.NewEnv(host.EnvOptions{Dispatcher: s.record, Egressed: s.offSend.Egressed})
	if err != nil {
		s.checks.Add("load", time.Now(), err, "")
		return s.rep
	}
	defer env.Close()
	s.env = env
	defer func() {
		if p := s.current(); p != nil {
			p.Close()
		}
	}()

	check := s.checks.Run
	if !check("load (manifest, configure)", s.load) {
		return s.rep
	}
	check("webhook: url_verification", s.checkURLVerification)
	check("webhook: forged requests refused", s.checkForgeries)
	check("webhook: retries are one event", s.checkRetries)
	check("webhook: shipped samples", s.checkSamples)
	check("inbound: message + app_mention once", s.checkDoubleDelivery)
	check("inbound: workspace in the scope", s.checkWorkspaces)
	check("inbound: threads and mention gating", s.checkThreads)
	check("inbound: own messages skipped", s.checkOwnMessages)
	check("send: into the thread", s.checkSendThread)
	check("send: long text split, not cut", s.checkLongText)
	check("send: 429 mapped to Retry-After", s.checkRateLimit)
	check("send: not executed is retryable", s.checkNotExecuted)
	check("send: lost answer is uncertain", s.checkUncertain)
	check("send: refusals typed", s.checkRefusals)
	check("send: timeout under the deadline", s.checkTimeout)
	if s.p.Manifest().Has(abi.CapTyping) {
		check("send: typing in assistant threads", s.checkTyping)
	}
	if s.p.Manifest().Has(abi.CapAttachments) {
		check("files: attachments fetched with the token", s.checkFilesIn)
		check("files: sent in three steps, lost answer uncertain", s.checkFilesOut)
	}
	if s.p.Manifest().Has(abi.CapButtons) {
		check("buttons: signed press is a callback", s.checkButtons)
	}
	if s.p.Manifest().Has(abi.CapPoll) {
		check("socket: ack after the host records", s.checkSocketAck)
		check("socket: reconnect, no duplicates", s.checkSocketReconnect)
	}
	check("egress: messages posted only from send", s.offSend.Check)
	return s.rep
}

// postingMethod reports whether a Web API method puts something into a conversation or
// changes what it shows.
func postingMethod(m string) bool {
	for _, prefix := range []string{"chat.", "assistant.threads.set", "reactions.", "files.", "pins."} {
		if strings.HasPrefix(m, prefix) && m != "chat.getPermalink" {
			return true
		}
	}
	return false
}

// recorder is the host's hermes_dispatch for the suite: it records when each event id was first
// recorded, and deduplicates as the host does.
type recorder struct {
	mu     sync.Mutex
	first  map[string]time.Time
	count  map[string]int
	events []abi.InboundEvent
}

func (r *recorder) Dispatch(_ context.Context, _ host.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	r.note(ev)
	return abi.DispatchReply{Duplicate: r.times(ev.ID) > 1}, nil
}

func (r *recorder) note(ev abi.InboundEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first, r.count = map[string]time.Time{}, map[string]int{}
	}
	r.count[ev.ID]++
	if r.count[ev.ID] == 1 {
		r.first[ev.ID] = time.Now()
		r.events = append(r.events, ev)
	}
}

func (r *recorder) times(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[id]
}

func (r *recorder) got() []abi.InboundEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]abi.InboundEvent(nil), r.events...)
}

// profiles are the configurations the adapter is loaded with.
func (s *suite) profiles() map[string]json.RawMessage {
	events := map[string]any{"bot_token": st.DefaultBotToken, "signing_secret": s.slack.SigningSecret(),
		"api_base": s.slack.APIURL(), "workspaces": map[string]any{secondTeam: map[string]any{"bot_token": secondToken}}}
	socket := map[string]any{"bot_token": st.DefaultBotToken, "app_token": s.sock.AppToken(), "mode": "socket",
		"api_base": s.sock.APIURL(), "signing_secret": s.sock.SigningSecret()}
	out := map[string]json.RawMessage{}
	out[profEvents], _ = json.Marshal(events)
	out[profSocket], _ = json.Marshal(socket)
	return out
}

func (s *suite) load() (string, error) {
	if p := s.current(); p != nil {
		p.Close()
		s.setPlugin(nil)
	}
	start := time.Now()
	p, err := host.LoadPlugin(s.ctx, s.path, host.PluginOptions{
		Env: s.env, Profiles: s.profiles(), Egress: host.Egress{Extra: []string{"127.0.0.1"}},
		CallTimeout: s.opts.CallTimeout, CacheDir: s.opts.CacheDir,
	})
	if err != nil {
		return "", err
	}
	s.setPlugin(p)
	info := p.Info()
	m := info.Manifest
	s.rep.Manifest = &m
	var errs []error
	if m.Kind != abi.KindPlatform || m.Platform != "slack" {
		errs = append(errs, fmt.Errorf("kind %q platform %q, want a platform plugin for \"slack\"", m.Kind, m.Platform))
	}
	if m.MessageLimit.Max <= 0 || m.MessageLimit.Max > st.MaxTextLength || m.MessageLimit.Unit == abi.UnitByte {
		errs = append(errs, fmt.Errorf("message_limit %+v: want at most %d characters", m.MessageLimit, st.MaxTextLength))
	}
	for _, c := range []string{abi.CapWebhook, abi.CapThreads} {
		if !m.Has(c) {
			errs = append(errs, fmt.Errorf("capability %q missing", c))
		}
	}
	for name, problems := range info.Profiles {
		if len(problems) > 0 && (name == profEvents || m.Has(abi.CapPoll)) {
			errs = append(errs, fmt.Errorf("profile %s rejected: %s", name, strings.Join(problems, "; ")))
		}
	}
	return fmt.Sprintf("%s %s, capabilities %s, loaded in %v", m.Name, m.Version, strings.Join(m.Capabilities, ","),
		time.Since(start).Round(time.Millisecond)), errors.Join(errs...)
}

// forwarder plays the host's POST /hooks/slack/{profile}: the adapter's webhook export, then
// the events recorded (deduplicated by id), then the answer.
type forwarder struct {
	suite *suite
	mu    sync.Mutex
	p     *host.Plugin
	lose  string // the next delivery whose body holds this text never reaches the adapter
}

// loseNext makes the next delivery whose body contains text fail before the adapter sees it (a
// network failure on the way in): Slack's retry is then the only copy.
func (f *forwarder) loseNext(text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lose = text
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	f.mu.Lock()
	lost := f.lose != "" && strings.Contains(string(body), f.lose)
	if lost {
		f.lose = ""
	}
	f.mu.Unlock()
	if lost {
		http.Error(w, "lost on the way", http.StatusBadGateway)
		return
	}
	p := f.suite.current()
	if p == nil {
		http.Error(w, "no plugin", http.StatusServiceUnavailable)
		return
	}
	// Not r.Context(): Slack gives up after 3 s, and a call cancelled under the plugin counts as
	// its crash; the host records what the plugin returns however late.
	res, err := p.Webhook(context.WithoutCancel(r.Context()), profEvents, abi.WebhookRequest{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Headers: r.Header, Body: body,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	for _, ev := range res.Events {
		f.suite.record.note(ev)
	}
	for k, vs := range res.Response.Headers {
		w.Header()[k] = vs
	}
	status := res.Response.Status
	if status < 100 || status > 599 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	w.Write(res.Response.Body)
}

func (s *suite) setPlugin(p *host.Plugin) {
	s.hook.mu.Lock()
	defer s.hook.mu.Unlock()
	s.p = p
	s.hook.p = p
}

func (s *suite) current() *host.Plugin {
	s.hook.mu.Lock()
	defer s.hook.mu.Unlock()
	return s.hook.p
}
