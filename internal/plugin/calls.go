package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// configureProfiles validates every configured profile (schema, then the plugin's configure
// export), all at once, each under its own call deadline: a profile whose configure hangs costs
// the load one deadline, not one per profile. A profile with problems is disabled and reported;
// the others serve.
func (v *version) configureProfiles(ctx context.Context) error {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	profiles := map[string]*profileState{}
	for profile, cfg := range v.settings.Profiles {
		wg.Go(func() {
			ps := &profileState{config: cfg, problems: v.configure(ctx, profile, cfg)}
			if len(ps.problems) > 0 {
				v.rt.log.Warn("plugin profile disabled: configuration rejected",
					"plugin", v.manifest.Name, "profile", profile, "problems", strings.Join(ps.problems, "; "))
			}
			mu.Lock()
			profiles[profile] = ps
			mu.Unlock()
		})
	}
	wg.Wait()
	v.profiles = profiles
	return nil
}

// configure validates one profile's configuration and returns its problems (none: it serves).
func (v *version) configure(ctx context.Context, profile string, cfg json.RawMessage) []string {
	if problems := validateConfig(&v.manifest, cfg); len(problems) > 0 {
		return problems
	}
	in, _ := json.Marshal(abi.ConfigureRequest{Call: abi.Call{Profile: profile, Config: cfg,
		DeadlineMs: remaining(ctx, v.limits.CallTimeout).Milliseconds()}})
	out, err := v.call(ctx, v.caller(profile), abi.ExportConfigure, in, v.limits.CallTimeout)
	var res abi.ConfigureResult
	switch {
	case err != nil:
		return []string{"configure failed: " + err.Error()}
	case json.Unmarshal(out, &res) != nil:
		return []string{"configure returned malformed JSON"}
	}
	return res.Problems
}

func (v *version) profile(name string) (*profileState, error) {
	v.profMu.RLock()
	defer v.profMu.RUnlock()
	ps := v.profiles[name]
	if ps == nil {
		return nil, abi.Errorf(abi.CodeNotFound, "plugin %s has no profile %q configured", v.manifest.Name, name)
	}
	if len(ps.problems) > 0 {
		return nil, abi.Errorf(abi.CodeDenied, "plugin %s profile %q is disabled: %s", v.manifest.Name, name, strings.Join(ps.problems, "; "))
	}
	return ps, nil
}

// Profiles lists the profiles configured for the plugin that passed validation.
func (p *Plugin) Profiles() []string {
	v := p.current()
	if v == nil {
		return nil
	}
	v.profMu.RLock()
	defer v.profMu.RUnlock()
	var out []string
	for name, ps := range v.profiles {
		if len(ps.problems) == 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// remaining is the time a call with this timeout has under ctx.
func remaining(ctx context.Context, timeout time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return min(timeout, time.Until(d))
	}
	return timeout
}

// typedCall is the common path of the typed calls: build the request with the profile's
// configuration, call, decode the reply.
func typedCall[Res any](ctx context.Context, p *Plugin, profile, export string, timeout time.Duration, build func(abi.Call) any) (*Res, error) {
	v := p.acquire()
	if v == nil {
		return nil, fmt.Errorf("plugin %s: %w", p.name, ErrUnloaded)
	}
	defer v.inflight.Done()
	return typedCallOn[Res](ctx, v, nil, profile, export, timeout, build)
}

// typedCallOn is typedCall on version v, with a reserved instance (consumed) or, when inst is
// nil, one from the pool.
func typedCallOn[Res any](ctx context.Context, v *version, inst *instance, profile, export string, timeout time.Duration, build func(abi.Call) any) (*Res, error) {
	ps, err := v.profile(profile)
	if err != nil {
		if inst != nil {
			v.pool.put(inst, classOf(export))
		}
		return nil, err
	}
	if timeout <= 0 {
		timeout = v.limits.CallTimeout
	}
	in, err := json.Marshal(build(abi.Call{Profile: profile, Config: ps.config, DeadlineMs: remaining(ctx, timeout).Milliseconds()}))
	if err != nil {
		if inst != nil {
			v.pool.put(inst, classOf(export))
		}
		return nil, err
	}
	out, err := v.callOn(ctx, inst, v.caller(profile), export, in, timeout)
	if err != nil {
		return nil, err
	}
	res := new(Res)
	if err := json.Unmarshal(out, res); err != nil {
		return nil, abi.Errorf(abi.CodeInternal, "plugin %s: %s returned malformed JSON: %v", v.manifest.Name, export, err)
	}
	return res, nil
}

// Webhook passes an inbound HTTP request to the plugin.
func (p *Plugin) Webhook(ctx context.Context, profile string, req abi.WebhookRequest) (*abi.WebhookResult, error) {
	if !p.Manifest().Has(abi.CapWebhook) {
		return nil, abi.Errorf(abi.CodeUnsupported, "plugin %s does not take webhooks", p.name)
	}
	return typedCall[abi.WebhookResult](ctx, p, profile, abi.ExportWebhook, 0, func(c abi.Call) any {
		req.Call = c
		return req
	})
}

// Poll asks the plugin for inbound events, letting it block up to wait.
func (p *Plugin) Poll(ctx context.Context, profile string, wait time.Duration) (*abi.PollResult, error) {
	if !p.Manifest().Has(abi.CapPoll) {
		return nil, abi.Errorf(abi.CodeUnsupported, "plugin %s does not poll", p.name)
	}
	limits := p.current().limits
	res, err := typedCall[abi.PollResult](ctx, p, profile, abi.ExportPoll, wait+limits.CallTimeout, func(c abi.Call) any {
		return abi.PollRequest{Call: c, WaitMs: wait.Milliseconds()}
	})
	if err == nil {
		p.setStatus(profile, res.Status)
	}
	return res, err
}

// setStatus records what a poll reported about a profile (nil clears it). It lives on the
// Plugin, so a reload keeps showing it until the new version polls.
func (p *Plugin) setStatus(profile string, st *abi.ProfileStatus) {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	if st == nil {
		delete(p.status, profile)
		return
	}
	if p.status == nil {
		p.status = map[string]abi.ProfileStatus{}
	}
	p.status[profile] = *st
}

// Send asks the plugin to transmit one message.
func (p *Plugin) Send(ctx context.Context, profile string, msg abi.OutboundMessage) (*abi.SendResult, error) {
	return typedCall[abi.SendResult](ctx, p, profile, abi.ExportSend, 0, func(c abi.Call) any {
		return abi.SendRequest{Call: c, Message: msg}
	})
}

// Fetch asks a platform plugin for an attachment's bytes (capability "attachments", ABI 1.2),
// accepting at most maxBytes: a larger answer is refused here with CodeTooLarge whatever the
// plugin did with the limit.
func (p *Plugin) Fetch(ctx context.Context, profile string, att abi.Attachment, maxBytes int64) (*abi.FetchResult, error) {
	if !p.Manifest().Has(abi.CapAttachments) {
		return nil, abi.Errorf(abi.CodeUnsupported, "plugin %s does not fetch attachments (no capability %q)", p.name, abi.CapAttachments)
	}
	att.Data = nil
	res, err := typedCall[abi.FetchResult](ctx, p, profile, abi.ExportFetch, 0, func(c abi.Call) any {
		return abi.FetchRequest{Call: c, Attachment: att, MaxBytes: maxBytes}
	})
	if err == nil && int64(len(res.Data)) > maxBytes {
		return nil, abi.Errorf(abi.CodeTooLarge, "plugin %s returned %d bytes for %s; the limit is %d", p.name, len(res.Data), att.Kind, maxBytes)
	}
	return res, err
}

// Tick wakes a scheduler plugin. Ticks of one profile never overlap each other or a jobs call
// that changes jobs.
func (p *Plugin) Tick(ctx context.Context, profile string, now time.Time) (*abi.TickResult, error) {
	unlock, err := p.exclusive(ctx, profile)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p.schedMu.Lock()
	interrupted := p.tickCrash[profile]
	p.schedMu.Unlock()
	res, err := typedCall[abi.TickResult](ctx, p, profile, abi.ExportTick, 0, func(c abi.Call) any {
		return abi.TickRequest{Call: c, UnixMs: now.UnixMilli(), Interrupted: interrupted}
	})
	// The next tick is told how this one ended if it crashed, so the scheduler can tell a run
	// its deadline stopped from one a host stop cut short; a tick that returned clears it, and a
	// tick that failed otherwise leaves it for the next.
	var crash *CrashError
	p.schedMu.Lock()
	switch {
	case errors.As(err, &crash):
		if p.tickCrash == nil {
			p.tickCrash = map[string]string{}
		}
		p.tickCrash[profile] = crash.Reason
	case err == nil:
		delete(p.tickCrash, profile)
	}
	p.schedMu.Unlock()
	return res, err
}

// Jobs lists or changes a scheduler's jobs (capability "jobs", ABI 1.1). A call that changes
// jobs waits for the profile's tick in progress, so the plugin never has two writers.
func (p *Plugin) Jobs(ctx context.Context, profile string, req abi.JobsRequest) (*abi.JobsResult, error) {
	if !p.Manifest().Has(abi.CapJobs) {
		return nil, abi.Errorf(abi.CodeUnsupported, "plugin %s does not manage jobs (no capability %q)", p.name, abi.CapJobs)
	}
	if req.Op != abi.JobsList {
		unlock, err := p.exclusive(ctx, profile)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	return typedCall[abi.JobsResult](ctx, p, profile, abi.ExportJobs, 0, func(c abi.Call) any {
		req.Call = c
		return req
	})
}

// exclusive takes the profile's scheduler lock (a one-slot channel, so waiting honours ctx) and
// returns its release.
func (p *Plugin) exclusive(ctx context.Context, profile string) (func(), error) {
	p.schedMu.Lock()
	if p.sched == nil {
		p.sched = map[string]chan struct{}{}
	}
	ch := p.sched[profile]
	if ch == nil {
		ch = make(chan struct{}, 1)
		p.sched[profile] = ch
	}
	p.schedMu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, abi.Errorf(abi.CodeTimeout, "plugin %s profile %s: waiting for the scheduler's call in progress: %v", p.name, profile, ctx.Err())
	}
}

// Active reports whether the plugin is loaded and its breaker has not tripped. It is cheap
// enough for every send (Info copies the manifest and profiles).
func (p *Plugin) Active() bool {
	v := p.current()
	return v != nil && v.breaker.check(p.name) == nil
}

// Status is nil when the plugin can serve, and otherwise says why not: its file was removed
// (ErrUnloaded), or its breaker tripped (a *FailedError carrying the last crash).
func (p *Plugin) Status() error {
	v := p.current()
	if v == nil {
		return fmt.Errorf("plugin %s: %w", p.name, ErrUnloaded)
	}
	return v.breaker.check(p.name)
}

// Info describes a loaded plugin for the admin API and the CLI.
type Info struct {
	Name      string              `json:"name"`
	File      string              `json:"file"`
	SHA256    string              `json:"sha256"`
	ABI       string              `json:"abi"`
	Manifest  abi.Manifest        `json:"manifest"`
	State     string              `json:"state"` // active or failed
	LastError string              `json:"last_error,omitempty"`
	Instances int                 `json:"instances"`
	Loaded    time.Time           `json:"loaded"`
	Profiles  map[string][]string `json:"profiles"` // profile → problems (empty: serving)
	// Status is what the plugin last reported about each profile from poll, if anything.
	Status map[string]abi.ProfileStatus `json:"status,omitempty"`
	// Warnings found at load (unscoped egress to a chat platform's API).
	Warnings []string `json:"warnings,omitempty"`
	// EgressDenied counts egress calls the policy refused; LastDenied is the last refusal.
	EgressDenied int64  `json:"egress_denied,omitempty"`
	LastDenied   string `json:"last_denied,omitempty"`
	// Crashes counts the instances of this version that crashed (trapped, exited, ran past
	// their deadline), before the breaker trips as after; LastCrash is the latest, at LastCrashAt.
	Crashes     int        `json:"crashes,omitempty"`
	LastCrash   string     `json:"last_crash,omitempty"`
	LastCrashAt *time.Time `json:"last_crash_at,omitempty"`
}

// Info reports the plugin's current state.
func (p *Plugin) Info() Info {
	v := p.current()
	if v == nil {
		return Info{Name: p.name, State: "unloaded"}
	}
	state, last := v.breaker.state()
	info := Info{
		Name: p.name, File: v.file, SHA256: v.sha256, ABI: v.abi.String(), Manifest: v.manifest,
		State: state, LastError: last, Instances: v.pool.size(), Loaded: v.loaded,
		Profiles: map[string][]string{}, Warnings: v.warnings, EgressDenied: v.denied.Load(),
	}
	info.LastDenied, _ = v.lastDenied.Load().(string)
	if n, last, at := v.breaker.crashed(); n > 0 {
		info.Crashes, info.LastCrash, info.LastCrashAt = n, last.Error(), &at
	}
	v.profMu.RLock()
	for name, ps := range v.profiles {
		info.Profiles[name] = append([]string{}, ps.problems...)
	}
	v.profMu.RUnlock()
	p.statusMu.Lock()
	for name, st := range p.status {
		if info.Status == nil {
			info.Status = map[string]abi.ProfileStatus{}
		}
		info.Status[name] = st
	}
	p.statusMu.Unlock()
	return info
}
