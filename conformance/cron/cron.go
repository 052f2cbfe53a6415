// Package cron is the scheduler profile of the conformance suite. It loads a scheduler plugin
// (.wasm, kind scheduler with capability jobs) through the production runtime against an
// in-process host whose clock moves only when the suite says (hermes_clock and tick times), whose
// hermes_send records every request and can answer "stale" for a conversation the user left,
// fail a delivery, answer "pending" and later the ledger's outcome (delivery_id), or die
// mid-send, and whose hermes_agent echoes the prompt (or outlasts the call's deadline). It checks
// what schedulers get wrong: the next run of each schedule form, time zones and daylight saving
// time, catch-up after downtime (once, and in bounded time after months), at most one delivery
// per slot across a restart mid-send, a deadline told from a host stop, pinned deliveries after
// /new, [SILENT] output, failures recorded on the job, pending runs reconciled, deduplicated
// targets, chat scopes, a chat's jobs kept to their chat and targets on unserved platforms
// refused.
//
// The plugin is driven with the first-party cron plugin's job syntax (plugins/cron/README.md)
// and configuration keys (timezone, home, chat_targets), which a scheduler must accept to be
// checked.
package cron

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
	hermes "github.com/hermes-host/hermes-host/host"
)

// Options tune a run.
type Options struct {
	// CallTimeout bounds each call into the plugin (default: the host's default, 10s).
	CallTimeout time.Duration
	// CacheDir is the compilation cache; empty uses the user cache directory.
	CacheDir string
}

// Profiles of the suite: each check uses its own, so checks never see each other's jobs.
var profiles = []string{"once", "iso", "interval", "cron", "natural", "dst", "catchup", "skip", "downtime", "restart",
	"deadline", "pinned", "silent", "failures", "pending", "targets", "scope", "chattargets", "platforms"}

// profileConfig is each profile's configuration: UTC, one home channel; the targets profile lets
// jobs created from a chat deliver anywhere (chat_targets), the others keep them in their chat.
func profileConfig(name string) json.RawMessage {
	if name == "targets" {
		return json.RawMessage(`{"timezone":"UTC","home":{"telegram":"-100900:3"},"chat_targets":["*"]}`)
	}
	return json.RawMessage(`{"timezone":"UTC","home":{"telegram":"-100900:3"}}`)
}

// t0 is a Wednesday noon, UTC: every check starts there.
var t0 = time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)

// A forum topic jobs are created from.
var topic = abi.Source{Platform: "telegram", ChatType: abi.ChatForum, ChatID: "-100123", ThreadID: "42", UserID: "111"}

type suite struct {
	ctx    context.Context
	opts   Options
	path   string
	rep    *conformance.Report
	checks conformance.Checks
	env    *hermes.Env
	clock  *fakeclock.Clock
	host   *host
	p      *hermes.Plugin
	// interruptedByStop is the last_error checkRestart saw after a host stop mid-run.
	interruptedByStop string
}

// Run checks the scheduler at wasmPath and reports each behaviour as a result. It never panics:
// a failure inside a check is that check's result.
func Run(ctx context.Context, wasmPath string, opts Options) *conformance.Report {
	s := &suite{ctx: ctx, opts: opts, path: wasmPath, rep: &conformance.Report{File: wasmPath},
		clock: fakeclock.New(t0), host: newHost()}
	s.host.clock = s.clock.Now
	s.checks = conformance.Checks{Report: s.rep}
	// The kv store outlives a "restart" of the plugin; the clock and the send and agent host
	// functions are the suite's.
	env, err := hermes.NewEnv(hermes.EnvOptions{Now: s.clock.Now, Sender: s.host, Agents: s.host})
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
	if !s.check("load (scheduler, capability jobs)", s.load) {
		return s.rep
	}
	s.check("next run: in 30m", s.checkIn)
	s.check("next run: ISO time in the zone", s.checkISO)
	s.check("next run: every 2h", s.checkInterval)
	s.check("next run: cron expression", s.checkCron)
	s.check("next run: daily at, weekdays at", s.checkNatural)
	s.check("time zone: DST, once per day", s.checkDST)
	s.check("catch-up: once after downtime", s.checkCatchUpOnce)
	s.check("catch-up: skip after downtime", s.checkCatchUpSkip)
	s.check("catch-up: once after months of downtime", s.checkLongDowntime)
	s.check("at most once: restart mid-send", s.checkRestart)
	s.check("interrupted: a deadline is not a host stop", s.checkDeadline)
	s.check("pinned: stale after /new", s.checkPinned)
	s.check("output: [SILENT] sends nothing", s.checkSilent)
	s.check("failures: recorded on the job", s.checkFailures)
	s.check("pending: reconciled from the ledger", s.checkPending)
	s.check("targets: deduplicated", s.checkTargets)
	s.check("jobs: scoped to their chat", s.checkScope)
	s.check("jobs: a chat's targets stay in it", s.checkChatTargets)
	s.check("targets: unserved platforms refused", s.checkPlatforms)
	return s.rep
}

// check runs one check and records it in the report.
func (s *suite) check(name string, f func() (string, error)) bool { return s.checks.Run(name, f) }

// load (re)loads the plugin over the suite's environment: a second load is a restart with the
// same kv store.
func (s *suite) load() (string, error) {
	if s.p != nil {
		s.p.Close()
		s.p = nil
	}
	start := time.Now()
	cfg := map[string]json.RawMessage{}
	for _, name := range profiles {
		cfg[name] = profileConfig(name)
	}
	p, err := hermes.LoadPlugin(s.ctx, s.path, hermes.PluginOptions{
		Env: s.env, Profiles: cfg, CallTimeout: s.opts.CallTimeout, NoBreaker: true, CacheDir: s.opts.CacheDir,
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
	if m.Kind != abi.KindScheduler || !m.Has(abi.CapJobs) {
		errs = append(errs, fmt.Errorf("kind %q capabilities %v: want a scheduler with capability %q", m.Kind, m.Capabilities, abi.CapJobs))
	}
	for name, problems := range info.Profiles {
		if len(problems) > 0 {
			errs = append(errs, fmt.Errorf("profile %s rejected: %s", name, strings.Join(problems, "; ")))
		}
	}
	return fmt.Sprintf("%s %s, ABI %s, loaded in %v", m.Name, m.Version, info.ABI, time.Since(start).Round(time.Millisecond)), errors.Join(errs...)
}

// --- the host side ---

// send is one hermes_send the plugin made, and what the suite's host answered.
type send struct {
	abi.HostSendRequest
	Profile   string
	At        time.Time // the host clock
	Delivered bool
}

// host answers hermes_send and hermes_agent for the suite.
type host struct {
	mu      sync.Mutex
	sends   []send
	stale   map[string]bool   // sessions the user has left
	fail    map[string]string // profile → answer sends "failed" with this reason
	agent   map[string]string // profile → the agent's answer (default "agent: " + prompt)
	block   map[string]bool   // profile → the next send hangs until the call is aborted
	blocked chan string
	slow    map[string]bool // profile → agent turns hang until the call is aborted
	// pending answers the profile's sends "pending" (the host's wait ran out); outcomes is what
	// the ledger says of each delivery id later (absent: still pending; "delivered", or a failure
	// reason).
	pending  map[string]bool
	ids      int
	outcomes map[string]string
	clock    func() time.Time
}

func newHost() *host {
	return &host{stale: map[string]bool{}, fail: map[string]string{}, agent: map[string]string{}, block: map[string]bool{},
		blocked: make(chan string, 1), slow: map[string]bool{}, pending: map[string]bool{}, outcomes: map[string]string{}}
}

func (h *host) HostSend(ctx context.Context, c hermes.Caller, req abi.HostSendRequest) (abi.HostSendReply, error) {
	h.mu.Lock()
	if req.DeliveryID != "" { // a question about an earlier send: nothing is sent
		defer h.mu.Unlock()
		if req.Text != "" || req.Target.ChatID != "" {
			return abi.HostSendReply{}, abi.Errorf(abi.CodeBadRequest, "delivery_id asks about an earlier send: give no text and no target chat")
		}
		switch o, ok := h.outcomes[req.DeliveryID]; {
		case !ok:
			return abi.HostSendReply{DeliveryID: req.DeliveryID, State: "pending"}, nil
		case o == "delivered":
			return abi.HostSendReply{DeliveryID: req.DeliveryID, State: "delivered", MessageIDs: []string{"1"}}, nil
		default:
			return abi.HostSendReply{DeliveryID: req.DeliveryID, State: "failed", Reason: o}, nil
		}
	}
	sd := send{HostSendRequest: req, Profile: c.Profile, At: h.clock()}
	if req.PinSessionID != "" && h.stale[req.PinSessionID] {
		h.sends = append(h.sends, sd)
		h.mu.Unlock()
		return abi.HostSendReply{}, &abi.Error{Code: abi.CodeStale, Message: "stale: the pinned session ended at a user boundary"}
	}
	if h.block[c.Profile] {
		// The host dies mid-send: the message may have reached the platform.
		delete(h.block, c.Profile)
		sd.Delivered = true
		h.sends = append(h.sends, sd)
		h.mu.Unlock()
		h.blocked <- c.Profile
		<-ctx.Done()
		return abi.HostSendReply{}, abi.Errorf(abi.CodeTimeout, "the host stopped")
	}
	if h.pending[c.Profile] {
		h.ids++
		id := fmt.Sprintf("dlv_p%d", h.ids)
		h.sends = append(h.sends, sd)
		h.mu.Unlock()
		return abi.HostSendReply{DeliveryID: id, State: "pending"}, nil
	}
	reason := h.fail[c.Profile]
	sd.Delivered = reason == ""
	h.sends = append(h.sends, sd)
	h.mu.Unlock()
	if reason != "" {
		return abi.HostSendReply{DeliveryID: "dlv_conf", State: "failed", Reason: reason}, nil
	}
	return abi.HostSendReply{DeliveryID: "dlv_conf", State: "delivered", MessageIDs: []string{"1"}}, nil
}

func (h *host) AgentTurn(ctx context.Context, c hermes.Caller, req abi.AgentRequest) (abi.AgentReply, error) {
	h.mu.Lock()
	slow := h.slow[c.Profile]
	h.mu.Unlock()
	if slow {
		// A model slower than the call's deadline, whose answer to the cancellation also takes
		// a moment: the runtime stops the instance meanwhile.
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		return abi.AgentReply{}, abi.Errorf(abi.CodeTimeout, "the turn did not finish: %v", ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.agent[c.Profile]; ok {
		return abi.AgentReply{Text: a}, nil
	}
	return abi.AgentReply{Text: "agent: " + req.Prompt}, nil
}

// delivered returns the profile's delivered sends.
func (s *suite) delivered(profile string) []send {
	s.host.mu.Lock()
	defer s.host.mu.Unlock()
	var out []send
	for _, sd := range s.host.sends {
		if sd.Profile == profile && sd.Delivered {
			out = append(out, sd)
		}
	}
	return out
}

// --- driving the plugin ---

func (s *suite) add(profile string, spec abi.JobSpec, scope *abi.Source, session string) (abi.Job, error) {
	res, err := s.p.Jobs(s.ctx, profile, abi.JobsRequest{Op: abi.JobsAdd, Job: &spec, Scope: scope, ScopeSessionID: session, By: "telegram:111"})
	if err != nil {
		return abi.Job{}, fmt.Errorf("add %q: %w", spec.Schedule, err)
	}
	if len(res.Jobs) != 1 {
		return abi.Job{}, fmt.Errorf("add %q answered %d jobs, want the one added", spec.Schedule, len(res.Jobs))
	}
	return res.Jobs[0], nil
}

func (s *suite) job(profile, id string) (abi.Job, error) {
	res, err := s.p.Jobs(s.ctx, profile, abi.JobsRequest{Op: abi.JobsList})
	if err != nil {
		return abi.Job{}, fmt.Errorf("list: %w", err)
	}
	for _, j := range res.Jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return abi.Job{}, fmt.Errorf("job %s is not listed", id)
}

// tick sets the clock to t and ticks profile.
func (s *suite) tick(profile string, t time.Time) error {
	s.clock.Set(t)
	if _, err := s.p.Tick(s.ctx, profile, t); err != nil {
		return fmt.Errorf("tick at %s: %w", t.Format(time.RFC3339), err)
	}
	return nil
}

// ticks ticks profile at every step from start to end inclusive.
func (s *suite) ticks(profile string, start, end time.Time, step time.Duration) error {
	for t := start; !t.After(end); t = t.Add(step) {
		if err := s.tick(profile, t); err != nil {
			return err
		}
	}
	return nil
}

func times(sends []send) string {
	var out []string
	for _, sd := range sends {
		out = append(out, sd.At.UTC().Format("01-02 15:04"))
	}
	return strings.Join(out, ", ")
}

func wantNext(j abi.Job, want time.Time) error {
	if j.NextRunMs != want.UnixMilli() {
		return fmt.Errorf("next_run_ms is %s, want %s", time.UnixMilli(j.NextRunMs).UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
	}
	return nil
}

func wantSends(profile string, sends []send, want ...time.Time) error {
	var w []string
	for _, t := range want {
		w = append(w, t.UTC().Format("01-02 15:04"))
	}
	if got := times(sends); got != strings.Join(w, ", ") {
		return fmt.Errorf("%s: sent at [%s], want [%s]", profile, got, strings.Join(w, ", "))
	}
	return nil
}
