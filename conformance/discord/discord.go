// Package discord is the Discord profile of the conformance suite. It loads a Discord adapter
// (.wasm) through the production runtime, points it at a discordtest fake (the fake's two
// addresses stand in for discord.com and gateway.discord.gg, so the adapter's egress scopes
// apply), and checks the behaviours adapters tend to get wrong: IDENTIFY with the message
// content intent, heartbeats, a zombied connection closed and resumed, RESUME with the last
// recorded sequence after a drop, op 7 and op 9, the sequence committed only after the host
// recorded the event, message ids as event ids (a replay is one event), mention and reply
// addressing, threads keyed under their channel, the bot's own messages skipped, sends into
// the thread with nothing in the text able to ping (allowed_mentions), 429s (a route bucket,
// the global limit) mapped to retry_after, an exhausted bucket not hit again, answers lost after
// the message was posted reported as uncertain (never resent), a request timeout under the call
// deadline, refusals typed, and posts made only from send.
//
// The adapter is configured with the first-party plugin's configuration keys, which a Discord
// adapter must accept to be checked: bot_token, api_base and gateway_url.
package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance"
	dt "github.com/hermes-host/hermes-host/conformance/discordtest"
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
	profMain  = "main"
	profWrong = "wrong" // a token the fake refuses: configure must disable it
)

// The channels of the suite.
const (
	general = "5000000000000000001"
	threadA = "5000000000000000002" // a thread under general
	random  = "5000000000000000003"
	limited = "5000000000000000004" // a bucket of one message
	faulty  = "5000000000000000005" // faults and refusals
	nowhere = "5000000000000000099" // no such channel
	role    = "6000000000000000001"
	// heartbeat is the interval the fake announces: short, so that a zombie shows in a second.
	heartbeat = 400 * time.Millisecond
)

// suite is one run's state.
type suite struct {
	ctx     context.Context
	opts    Options
	path    string
	rep     *conformance.Report
	checks  conformance.Checks
	d       *dt.Server
	env     *host.Env
	p       *host.Plugin
	record  *recorder
	offSend *conformance.OffSend

	pollMu   sync.Mutex
	pollErrs []string
	stop     chan struct{}
	stopped  chan struct{}
}

// Run checks the Discord adapter at wasmPath against a fake Discord and reports each behaviour
// as a result. It never panics: a failure inside a check is that check's result.
func Run(ctx context.Context, wasmPath string, opts Options) *conformance.Report {
	if opts.Timeout <= 0 {
		opts.Timeout = 20 * time.Second
	}
	s := &suite{ctx: ctx, opts: opts, path: wasmPath, rep: &conformance.Report{File: wasmPath}, record: &recorder{}}
	s.checks = conformance.Checks{Report: s.rep}
	s.d = dt.New(nil, dt.WithHeartbeatInterval(heartbeat))
	defer s.d.Close()
	g := s.d.Guild()
	for _, c := range []struct{ id, name string }{{general, "general"}, {random, "random"}, {limited, "limited"}, {faulty, "faulty"}} {
		s.d.AddChannel(g, c.id, c.name)
	}
	s.d.SetRouteLimit("", dt.RouteLimit{Limit: 100, Window: 5 * time.Second})
	s.d.SetRouteLimit(limited, dt.RouteLimit{Limit: 1, Window: 3 * time.Second})

	s.offSend = conformance.NewOffSend("Discord's REST API", func(string) bool { return true })
	env, err := host.NewEnv(host.EnvOptions{Dispatcher: s.record, Egressed: func(c host.Caller, method string, u *url.URL, err error) {
		if method != "GET" { // every write to a channel posts, edits or shows something there
			s.offSend.Egressed(c, method, u, err)
		}
	}})
	if err != nil {
		s.checks.Add("load", time.Now(), err, "")
		return s.rep
	}
	defer env.Close()
	s.env = env
	defer func() {
		if s.p != nil {
			s.p.Close()
		}
	}()

	check := s.checks.Run
	if !check("load (manifest, configure)", s.load) {
		return s.rep
	}
	check("configure: wrong token refused", s.checkWrongToken)
	s.startPolling()
	defer s.stopPolling()
	check("gateway: identify with intents", s.checkIdentify)
	check("inbound: mentions, replies, threads, DMs", s.checkInbound)
	check("inbound: own and bots' messages skipped", s.checkOwnMessages)
	check("gateway: heartbeats", s.checkHeartbeats)
	check("gateway: seq committed after recording", s.checkSeqAfterRecording)
	check("gateway: drop resumes, none lost or doubled", s.checkDropResumes)
	check("gateway: zombie closed and resumed", s.checkZombie)
	check("gateway: op 7 resumes", s.checkReconnect)
	check("gateway: invalid session identifies", s.checkInvalidSession)
	check("send: into the thread, as a reply", s.checkSendThread)
	check("send: nothing in the text pings", s.checkNoPings)
	check("send: 429 mapped to retry_after", s.checkRateLimit)
	check("send: exhausted bucket not hit", s.checkBucket)
	check("send: lost answer is uncertain", s.checkUncertain)
	check("send: timeout under the deadline", s.checkTimeout)
	check("send: refusals typed", s.checkRefusals)
	check("send: 2000 characters whole", s.checkLimit)
	if s.p.Manifest().Has(abi.CapEdit) {
		check("send: edit without pings", s.checkEdit)
	}
	check("poll: no errors", s.checkPollErrors)
	check("egress: messages posted only from send", s.offSend.Check)
	return s.rep
}

// profiles are the configurations the adapter is loaded with.
func (s *suite) profiles() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	out[profMain], _ = json.Marshal(map[string]any{"bot_token": s.d.Token(), "api_base": s.d.APIURL(), "gateway_url": s.d.GatewayURL()})
	out[profWrong], _ = json.Marshal(map[string]any{"bot_token": "not-the-token", "api_base": s.d.APIURL(), "gateway_url": s.d.GatewayURL()})
	return out
}

func (s *suite) load() (string, error) {
	start := time.Now()
	p, err := host.LoadPlugin(s.ctx, s.path, host.PluginOptions{
		// The fake's addresses stand in for Discord's hosts: the adapter's egress scopes apply.
		Env: s.env, Profiles: s.profiles(), Egress: host.Egress{Alias: map[string]string{
			s.d.RESTAddr(): "discord.com", s.d.GatewayAddr(): "gateway.discord.gg"}},
		CallTimeout: s.opts.CallTimeout, CacheDir: s.opts.CacheDir,
	})
	if err != nil {
		return "", err
	}
	s.p = p
	info := p.Info()
	m := info.Manifest
	s.rep.Manifest = &m
	var errs []error
	if m.Kind != abi.KindPlatform || m.Platform != "discord" {
		errs = append(errs, fmt.Errorf("kind %q platform %q, want a platform plugin for \"discord\"", m.Kind, m.Platform))
	}
	if m.MessageLimit.Max <= 0 || m.MessageLimit.Max > dt.MaxContent || m.MessageLimit.Unit == abi.UnitByte {
		errs = append(errs, fmt.Errorf("message_limit %+v: want at most %d characters", m.MessageLimit, dt.MaxContent))
	}
	for _, c := range []string{abi.CapPoll, abi.CapThreads} {
		if !m.Has(c) {
			errs = append(errs, fmt.Errorf("capability %q missing", c))
		}
	}
	if problems := info.Profiles[profMain]; len(problems) > 0 {
		errs = append(errs, fmt.Errorf("profile %s rejected: %s", profMain, strings.Join(problems, "; ")))
	}
	return fmt.Sprintf("%s %s, capabilities %s, loaded in %v", m.Name, m.Version, strings.Join(m.Capabilities, ","),
		time.Since(start).Round(time.Millisecond)), errors.Join(errs...)
}

// startPolling runs the host's poll loop for the main profile until stopPolling: events the
// adapter returns (instead of dispatching them) count as recorded when poll returns, as the
// host records them then.
func (s *suite) startPolling() {
	s.stop, s.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.stopped)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			res, err := s.p.Poll(s.ctx, profMain, time.Second)
			if err != nil {
				s.pollMu.Lock()
				s.pollErrs = append(s.pollErrs, err.Error())
				s.pollMu.Unlock()
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for _, ev := range res.Events {
				s.record.note(ev)
			}
			if res.BackoffMs > 0 {
				select {
				case <-s.stop:
					return
				case <-time.After(min(time.Duration(res.BackoffMs)*time.Millisecond, time.Second)):
				}
			}
		}
	}()
}

func (s *suite) stopPolling() {
	close(s.stop)
	<-s.stopped
}

// recorder is the host's hermes_dispatch for the suite: it records when each event id was
// first recorded, deduplicates as the host does, and can refuse to record (the host's store
// failing) to see what the adapter does then.
type recorder struct {
	mu     sync.Mutex
	count  map[string]int
	events []abi.InboundEvent
	refuse int // refuse this many dispatches
}

func (r *recorder) Dispatch(_ context.Context, _ host.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	r.mu.Lock()
	if r.refuse > 0 {
		r.refuse--
		r.mu.Unlock()
		return abi.DispatchReply{}, abi.Errorf(abi.CodeInternal, "the store is unavailable (conformance: a failure to record)")
	}
	r.mu.Unlock()
	return abi.DispatchReply{Duplicate: r.note(ev) > 1}, nil
}

func (r *recorder) note(ev abi.InboundEvent) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == nil {
		r.count = map[string]int{}
	}
	r.count[ev.ID]++
	if r.count[ev.ID] == 1 {
		r.events = append(r.events, ev)
	}
	return r.count[ev.ID]
}

func (r *recorder) refuseNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = n
}

// of returns the events recorded for a Discord message id (any event id), oldest first.
func (r *recorder) of(messageID string) []abi.InboundEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []abi.InboundEvent
	for _, ev := range r.events {
		if ev.Source.MessageID == messageID {
			out = append(out, ev)
		}
	}
	return out
}

func (r *recorder) all() []abi.InboundEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]abi.InboundEvent(nil), r.events...)
}
