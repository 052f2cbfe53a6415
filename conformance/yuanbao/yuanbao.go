// Package yuanbao is the Yuanbao profile of the conformance suite. It loads a Yuanbao adapter
// (.wasm) through the production runtime, points its profiles at a yuanbaotest fake of the bot
// gateway, and checks the behaviours adapters tend to get wrong: signing (HMAC, Beijing time),
// AUTH_BIND before anything else, one connection kept across instances and reloads (the host
// owns it), mention gating in groups, the bot's own echo, recalls, JSON pushes, PushAcks only
// for recorded events, reconnecting with back-off and a new token, stopping for good on the
// permanent close codes, pings and missed pongs, and sends that are completed by the answer
// with their msg_id (a late answer is uncertain, never a success, never resent).
//
// The adapter is configured with the first-party plugin's configuration keys, which a Yuanbao
// adapter must accept to be checked: app_id, app_secret, api_domain, ws_url, and
// send_timeout_ms (how long a send waits for its answer).
package yuanbao

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance"
	"github.com/hermes-host/hermes-host/conformance/fakeclock"
	ybt "github.com/hermes-host/hermes-host/conformance/yuanbaotest"
	"github.com/hermes-host/hermes-host/host"
)

// Options tune a run.
type Options struct {
	// CallTimeout bounds each call into the plugin (default: the host's default, 10s).
	CallTimeout time.Duration
	// CacheDir is the compilation cache; empty uses the user cache directory.
	CacheDir string
	// Timeout bounds every wait for the fake or the plugin (default 20s).
	Timeout time.Duration
}

// Profiles the suite configures, one bot each so that checks do not share state.
const (
	profInbound = "inbound"
	profSend    = "send"
	profConn    = "conn"
	profStop    = "stop"
	profPing    = "ping"
	profWrong   = "wrong" // a wrong secret: must be disabled by configure
)

var profileNames = []string{profInbound, profSend, profConn, profStop, profPing}

const (
	pollWait    = 2 * time.Second // the wait the suite polls with
	maxPolls    = 12              // polls a check makes at most while waiting for something
	sendTimeout = 1500            // send_timeout_ms configured
)

var (
	ann   = ybt.User{ID: "u_ann", Nick: "Ann"}
	bob   = ybt.User{ID: "u_bob", Nick: "Bob"}
	group = ybt.Group{Code: "g_conformance", Name: "Conformance"}
)

func appID(profile string) string { return "conf-app-" + profile }
func botID(profile string) string { return "conf_bot_" + profile }

// suite is one run's state.
type suite struct {
	ctx   context.Context
	opts  Options
	path  string
	rep   *conformance.Report
	chk   conformance.Checks // records into rep
	yb    *ybt.Server
	env   *host.Env
	p     *host.Plugin
	clock *fakeclock.Ahead // the host clock the plugin sees: the ping check runs it ahead

	sendsMu sync.Mutex
	sends   [][2]time.Time // when each call to the send export started and ended
}

// Run checks the Yuanbao adapter at wasmPath against a fake gateway and reports each behaviour
// as a result. It never panics: a failure inside a check is that check's result.
func Run(ctx context.Context, wasmPath string, opts Options) *conformance.Report {
	if opts.Timeout <= 0 {
		opts.Timeout = 20 * time.Second
	}
	s := &suite{ctx: ctx, opts: opts, path: wasmPath, rep: &conformance.Report{File: wasmPath}, clock: &fakeclock.Ahead{}}
	s.chk.Report = s.rep
	fakeOpts := []ybt.Option{ybt.WithoutDefaultBot()}
	for _, name := range append(profileNames, profWrong) {
		fakeOpts = append(fakeOpts, ybt.WithBot(appID(name), "secret-"+name, botID(name), "owner_"+name))
	}
	s.yb = ybt.New(nil, fakeOpts...)
	defer s.yb.Close()

	// The kv store outlives a plugin reload, and the egress client owns the WebSocket
	// connections across reloads, as serve's does.
	env, err := host.NewEnv(host.EnvOptions{Now: s.clock.Now})
	if err != nil {
		s.chk.Add("load", time.Now(), err, "")
		return s.rep
	}
	defer env.Close()
	s.env = env
	defer func() {
		if s.p != nil {
			s.p.Close()
		}
	}()

	if !s.chk.Run("load (manifest, configure)", s.load) {
		return s.rep
	}
	s.chk.Run("configure: wrong secret refused", s.checkWrongSecret)
	s.chk.Run("connect: sign-token, AUTH_BIND first", s.checkConnect)
	s.chk.Run("inbound: DM, gating, owner, quote", s.checkInbound)
	s.chk.Run("inbound: own echo dropped", s.checkEcho)
	s.chk.Run("inbound: JSON pushes", s.checkJSON)
	s.chk.Run("inbound: recall is a redaction", s.checkRecall)
	s.chk.Run("inbound: ack after recording", s.checkAcks)
	s.chk.Run("send: completed by its answer", s.checkSend)
	s.chk.Run("send: late answer uncertain", s.checkLateAnswer)
	s.chk.Run("send: refusal is permanent", s.checkRefused)
	s.chk.Run("send: 4000 code points", s.checkLimit)
	s.chk.Run("reconnect: back-off, new token", s.checkReconnect)
	s.chk.Run("reconnect: dropped push once", s.checkDroppedPush)
	s.chk.Run("ping: two missed pongs", s.checkPing)
	s.chk.Run("close: permanent codes stop", s.checkPermanentClose)
	s.chk.Run("reload: same connection", s.checkReload)
	s.chk.Run("egress: messages written only from send", s.checkPostsOnlyFromSend)
	return s.rep
}

// profiles are the configurations the adapter is loaded with.
func (s *suite) profiles() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, name := range append(profileNames, profWrong) {
		secret := "secret-" + name
		if name == profWrong {
			secret = "not-the-secret"
		}
		out[name], _ = json.Marshal(map[string]any{"app_id": appID(name), "app_secret": secret, "api_domain": s.yb.URL(),
			"ws_url": s.yb.WSURL(), "send_timeout_ms": sendTimeout})
	}
	return out
}

// load (re)loads the adapter over the suite's environment: a second load is a reload, with the
// same kv store and the same host-owned connections.
func (s *suite) load() (string, error) {
	start := time.Now()
	p, err := host.LoadPlugin(s.ctx, s.path, host.PluginOptions{
		Env: s.env, Profiles: s.profiles(), Egress: host.Egress{Extra: []string{"127.0.0.1"}},
		CallTimeout: s.opts.CallTimeout, CacheDir: s.opts.CacheDir,
	})
	if err != nil {
		return "", err
	}
	if s.p != nil {
		s.p.Close()
	}
	s.p = p
	info := p.Info()
	m := info.Manifest
	if s.rep.Manifest == nil {
		s.rep.Manifest = &m
	}
	var errs []error
	if m.Kind != abi.KindPlatform || m.Platform != "yuanbao" {
		errs = append(errs, fmt.Errorf("kind %q platform %q, want a platform plugin for \"yuanbao\"", m.Kind, m.Platform))
	}
	if m.MessageLimit != (abi.MessageLimit{Max: 4000, Unit: abi.UnitCodePoint}) {
		errs = append(errs, fmt.Errorf("message_limit %+v, want 4000 codepoint", m.MessageLimit))
	}
	if !m.Has(abi.CapPoll) {
		errs = append(errs, errors.New("capability poll missing: the gateway is read by polling the host's WebSocket"))
	}
	for name, problems := range info.Profiles {
		if name != profWrong && len(problems) > 0 {
			errs = append(errs, fmt.Errorf("profile %s rejected: %s", name, strings.Join(problems, "; ")))
		}
	}
	return fmt.Sprintf("%s %s, loaded in %v", m.Name, m.Version, time.Since(start).Round(time.Millisecond)), errors.Join(errs...)
}

func (s *suite) bot(profile string) *ybt.Bot { return s.yb.BotByAppID(appID(profile)) }

// poll calls the adapter's poll export once.
func (s *suite) poll(profile string) (*abi.PollResult, error) {
	res, err := s.p.Poll(s.ctx, profile, pollWait)
	if err != nil {
		return nil, fmt.Errorf("poll %s: %w", profile, err)
	}
	return res, nil
}

// pollUntil polls (sleeping through back-offs) until cond holds, and returns the events seen.
func (s *suite) pollUntil(profile string, what string, cond func(evs []abi.InboundEvent, res *abi.PollResult) bool) ([]abi.InboundEvent, error) {
	var evs []abi.InboundEvent
	deadline := time.Now().Add(s.opts.Timeout)
	for i := 0; i < maxPolls && time.Now().Before(deadline); i++ {
		res, err := s.poll(profile)
		if err != nil {
			return evs, err
		}
		evs = append(evs, res.Events...)
		if cond(evs, res) {
			return evs, nil
		}
		if res.BackoffMs > 0 {
			time.Sleep(min(time.Duration(res.BackoffMs)*time.Millisecond, 2*time.Second))
		}
	}
	return evs, fmt.Errorf("%s: not within %d polls (events %v)", what, maxPolls, eventIDs(evs))
}

// connect polls until the bot has a bound connection.
func (s *suite) connect(profile string) error {
	b := s.bot(profile)
	_, err := s.pollUntil(profile, "the adapter never bound a connection", func([]abi.InboundEvent, *abi.PollResult) bool { return b.Connected() })
	return err
}

func eventIDs(evs []abi.InboundEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID+"/"+e.Kind)
	}
	return out
}

func kindOf(ev abi.InboundEvent) string {
	if ev.Kind == "" {
		return abi.EventMessage
	}
	return ev.Kind
}
