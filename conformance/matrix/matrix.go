// Package matrix is the Matrix profile of the conformance suite. It loads a Matrix adapter
// (.wasm) through the production runtime, points its profiles at matrixtest fake homeservers, and
// checks the behaviours adapters tend to get wrong: the /sync since token (kept across a
// restart, advanced only after the host recorded the events, history before the first sync not
// answered), sync gaps (a limited timeline filled, nothing lost), an expired token (stopped, not
// a crash loop), rooms and threads as sessions, mentions (m.mentions, the body as fallback) and
// replies to the bot, its own messages skipped; sends into the thread with "m.mentions": {} (no
// @room ping), a transaction id that the host's retry repeats (so a send retried after a lost
// answer is one event), 429 M_LIMIT_EXCEEDED with retry_after_ms, refusals typed, a slow answer
// typed under the call deadline, edits, end-to-end encrypted rooms refused with one notice, and
// no message posted from another export than send.
//
// The adapter is configured with the first-party plugin's configuration keys, which a Matrix
// adapter must accept to be checked: homeserver and access_token. It must learn its user id
// with whoami and its display name from its profile. The fakes stand in for
// matrix-client.matrix.org (egress_alias), so the adapter's egress scopes apply to them.
package matrix

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
	mt "github.com/hermes-host/hermes-host/conformance/matrixtest"
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

// Profiles of the suite, each on a homeserver of its own so that checks do not share state.
const (
	profPoll    = "poll"
	profInbound = "inbound"
	profSend    = "send"
	profBad     = "badtoken" // a token the homeserver does not know: configure must reject it
)

// DeclaredHost is the host the fakes stand in for.
const DeclaredHost = "matrix-client.matrix.org"

const (
	pollWait = 2 * time.Second
	maxPolls = 10
	ann      = "@ann:hermes.test"
	bob      = "@bob:hermes.test"
)

// suite is one run's state.
type suite struct {
	ctx    context.Context
	opts   Options
	path   string
	rep    *conformance.Report
	checks conformance.Checks
	hs     map[string]*mt.Server // by profile
	env    *host.Env
	p      *host.Plugin
	record *recorder
	off    *offSend
}

// Run checks the Matrix adapter at wasmPath against fake homeservers and reports each behaviour
// as a result. It never panics: a failure inside a check is that check's result.
func Run(ctx context.Context, wasmPath string, opts Options) *conformance.Report {
	if opts.Timeout <= 0 {
		opts.Timeout = 20 * time.Second
	}
	s := &suite{ctx: ctx, opts: opts, path: wasmPath, rep: &conformance.Report{File: wasmPath},
		hs: map[string]*mt.Server{}, record: &recorder{}, off: &offSend{}}
	s.checks = conformance.Checks{Report: s.rep}
	for _, name := range []string{profPoll, profInbound, profSend} {
		s.hs[name] = mt.New(nil)
		defer s.hs[name].Close()
		s.hs[name].AddUser(ann, "Ann")
		s.hs[name].AddUser(bob, "Bob")
	}
	env, err := host.NewEnv(host.EnvOptions{Dispatcher: s.record, Egressed: s.off.egressed})
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
	check("configure: rejected token refused", s.checkBadToken)
	check("poll: history before the first sync not answered", s.checkHistory)
	check("poll: since advanced only after the host recorded", s.checkSinceAfterRecord)
	check("poll: restart, no loss or replay", s.checkRestart)
	check("poll: sync gap filled", s.checkGap)
	check("poll: invitations joined, history skipped", s.checkInvite)
	check("poll: expired token stops the profile", s.checkExpiredToken)
	check("inbound: rooms, threads and mentions", s.checkInbound)
	check("inbound: reply to the bot is addressed", s.checkReplyToBot)
	check("inbound: own messages skipped", s.checkOwn)
	check("send: into the thread", s.checkSendThread)
	check("send: never pings (m.mentions empty)", s.checkNoPing)
	check("send: transaction id from the delivery id", s.checkTxn)
	check("send: lost answer retried once", s.checkLostAnswer)
	check("send: 429 mapped to retry_after_ms", s.checkRateLimit)
	check("send: refusals typed", s.checkRefusals)
	check("send: slow answer typed, no crash", s.checkSlow)
	if s.p.Manifest().Has(abi.CapEdit) {
		check("send: edit is m.replace", s.checkEdit)
	}
	check("send: encrypted room refused with one notice", s.checkEncrypted)
	check("egress: messages posted only from send", s.off.check)
	return s.rep
}

// recorder is the host's hermes_dispatch for the suite: it records each event id once, as the
// host deduplicates, and can be made to fail (the host could not record).
type recorder struct {
	mu     sync.Mutex
	count  map[string]int
	events []abi.InboundEvent
	fail   int // the next fail dispatches are refused
}

func (r *recorder) Dispatch(_ context.Context, _ host.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail > 0 {
		r.fail--
		return abi.DispatchReply{}, abi.Errorf(abi.CodeIO, "the store is unavailable")
	}
	if r.count == nil {
		r.count = map[string]int{}
	}
	r.count[ev.ID]++
	if r.count[ev.ID] == 1 {
		r.events = append(r.events, ev)
	}
	return abi.DispatchReply{Duplicate: r.count[ev.ID] > 1}, nil
}

func (r *recorder) failNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = n
}

func (r *recorder) times(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[id]
}

// byID returns the recorded event with id.
func (r *recorder) byID(id string) (abi.InboundEvent, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.ID == id {
			return e, true
		}
	}
	return abi.InboundEvent{}, false
}

// offSend records requests that post into a room (send, state, redact, typing) from an export
// other than send, and that egress let through.
type offSend struct {
	mu    sync.Mutex
	calls []string
}

func (o *offSend) egressed(c host.Caller, method string, u *url.URL, err error) {
	if c.Export == abi.ExportSend || abi.CodeOf(err) == abi.CodeDenied || method == "GET" {
		return
	}
	for _, seg := range []string{"/send/", "/state/", "/redact/", "/typing/"} {
		if strings.Contains(u.Path, seg) {
			o.mu.Lock()
			o.calls = append(o.calls, c.Export+": "+method+" "+strings.Trim(seg, "/"))
			o.mu.Unlock()
		}
	}
}

func (o *offSend) check() (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.calls) > 0 {
		return "", fmt.Errorf("%d room-posting requests outside send reached the homeserver (%s): only send may post, inside the host's guarded path; declare egress_scopes so the host refuses them",
			len(o.calls), strings.Join(o.calls[:min(len(o.calls), 5)], ", "))
	}
	return "every room-posting request came from send", nil
}

func (s *suite) profiles() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for name, hs := range s.hs {
		out[name], _ = json.Marshal(map[string]any{"homeserver": hs.URL(), "access_token": mt.DefaultBotToken})
	}
	out[profBad], _ = json.Marshal(map[string]any{"homeserver": s.hs[profPoll].URL(), "access_token": "syt_not_a_known_token"})
	return out
}

// load (re)loads the adapter over the suite's environment: a second load is a restart with the
// same kv store.
func (s *suite) load() (string, error) {
	if s.p != nil {
		s.p.Close()
		s.p = nil
	}
	start := time.Now()
	alias := map[string]string{}
	for _, hs := range s.hs {
		alias[hostOf(hs.URL())] = DeclaredHost
	}
	p, err := host.LoadPlugin(s.ctx, s.path, host.PluginOptions{
		Env: s.env, Profiles: s.profiles(), Egress: host.Egress{Alias: alias},
		CallTimeout: s.opts.CallTimeout, CacheDir: s.opts.CacheDir,
	})
	if err != nil {
		return "", err
	}
	s.p = p
	info := p.Info()
	m := info.Manifest
	if s.rep.Manifest == nil {
		s.rep.Manifest = &m
	}
	var errs []error
	if m.Kind != abi.KindPlatform || m.Platform != "matrix" {
		errs = append(errs, fmt.Errorf("kind %q platform %q, want a platform plugin for \"matrix\"", m.Kind, m.Platform))
	}
	for _, c := range []string{abi.CapPoll, abi.CapThreads} {
		if !m.Has(c) {
			errs = append(errs, fmt.Errorf("capability %q missing", c))
		}
	}
	if m.MessageLimit.Max <= 0 || (m.MessageLimit.Unit == abi.UnitByte && m.MessageLimit.Max > mt.MaxEventSize/2) {
		errs = append(errs, fmt.Errorf("message_limit %+v: a Matrix event is at most 64 KiB of JSON", m.MessageLimit))
	}
	for name, problems := range info.Profiles {
		if name == profBad {
			continue // checkBadToken
		}
		if len(problems) > 0 {
			errs = append(errs, fmt.Errorf("profile %s rejected: %s", name, strings.Join(problems, "; ")))
		}
	}
	return fmt.Sprintf("%s %s, capabilities %s, loaded in %v", m.Name, m.Version, strings.Join(m.Capabilities, ","),
		time.Since(start).Round(time.Millisecond)), errors.Join(errs...)
}

// checkBadToken: a profile whose access token the homeserver does not know (whoami answers
// M_UNKNOWN_TOKEN) is rejected at configure, with a reason for the operator.
func (s *suite) checkBadToken() (string, error) {
	problems := s.p.Info().Profiles[profBad]
	if len(problems) == 0 {
		return "", errors.New("a profile whose token the homeserver rejects (M_UNKNOWN_TOKEN) was accepted")
	}
	return strings.Join(problems, "; "), nil
}

// poll calls the adapter's poll export once.
func (s *suite) poll(profile string) (*abi.PollResult, error) {
	res, err := s.p.Poll(s.ctx, profile, pollWait)
	if err != nil {
		return nil, fmt.Errorf("poll %s: %w", profile, err)
	}
	for _, ev := range res.Events {
		// A host without dispatch gets events back: record them as the host would.
		s.record.Dispatch(s.ctx, host.Caller{}, ev)
	}
	return res, nil
}

// pollUntil polls until every id is recorded or the timeout.
func (s *suite) pollUntil(profile string, ids ...string) error {
	deadline := time.Now().Add(s.opts.Timeout)
	for i := 0; i < maxPolls && time.Now().Before(deadline); i++ {
		missing := 0
		for _, id := range ids {
			if s.record.times(id) == 0 {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if _, err := s.poll(profile); err != nil {
			return err
		}
	}
	var missing []string
	for _, id := range ids {
		if s.record.times(id) == 0 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("events %v never recorded after %d polls", missing, maxPolls)
	}
	return nil
}

// settle makes sure the profile is past its first sync (what is said now is new to it).
func (s *suite) settle(profile string) error {
	hs := s.hs[profile]
	for i := 0; i < 3; i++ {
		if _, err := s.poll(profile); err != nil {
			return err
		}
		for _, r := range hs.Requests(mt.EndpointSync) {
			if r.Since != "" && r.Status == 200 {
				return nil
			}
		}
	}
	// One more poll sends the first since.
	if _, err := s.poll(profile); err != nil {
		return err
	}
	return nil
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Host
}
