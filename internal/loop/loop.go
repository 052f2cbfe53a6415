// Package loop runs the host-driven loops of plugins: a poll loop for every serving profile of a
// platform plugin that declares the poll capability, and a tick loop for every profile of a
// scheduler plugin. A Supervisor starts and stops them as plugins load, reload and unload.
//
// Several instances sharing one database (Supervisor.Leases) run each loop in one instance at a
// time: a bot token answers a second concurrent long poll with an error (Telegram's 409), and a
// cron slot must fire once. The instance holding lease "loop:<plugin>/<profile>" runs the loop;
// the others campaign for it and take over within about the lease's ttl when the holder dies.
package loop

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/clock"
	"github.com/hermes-host/hermes-host/internal/inbound"
	"github.com/hermes-host/hermes-host/internal/lease"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

// PollWait is how long a poll export may wait for events (a long poll).
const PollWait = 25 * time.Second

// DefaultTick is how often a scheduler is woken when it does not say.
const DefaultTick = time.Minute

type key struct{ plugin, profile string }

type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{} // buffered(1): tick now (a scheduler's jobs changed)
}

// Supervisor owns the loops. Its methods are safe for concurrent use.
type Supervisor struct {
	plugins *plugin.Runtime
	door    *inbound.Door
	log     *slog.Logger
	// Clock is what schedulers are ticked with and what tick loops sleep on (default the real
	// clock; a test clock makes schedules run without waiting). Set it before Reconcile.
	Clock clock.Clock
	// Leases, when set, elects the instance that runs each loop among the instances sharing
	// the database: a loop runs only while this instance holds its lease (LeaseName), and
	// losing the lease cancels it (see poll for a poll in flight). Nil runs every loop here:
	// one instance. Set it before Reconcile.
	Leases *lease.Manager

	mu    sync.Mutex
	loops map[key]*running
}

// New returns a supervisor of the loops of rt's plugins; polled events go through door.
func New(rt *plugin.Runtime, door *inbound.Door, log *slog.Logger) *Supervisor {
	return &Supervisor{plugins: rt, door: door, log: log, loops: map[key]*running{}, Clock: clock.Real{}}
}

// Reconcile starts the loops that loaded plugins need and stops those whose plugin or profile is
// gone. Loops outlive ctx's cancellation only until Stop.
func (s *Supervisor) Reconcile(ctx context.Context) {
	want := map[key]*plugin.Plugin{}
	for _, p := range s.plugins.Plugins() {
		m := p.Manifest()
		if !m.Has(abi.CapPoll) && m.Kind != abi.KindScheduler {
			continue
		}
		if p.Status() != nil {
			continue // failed: its loops stopped; replacing the file starts them again
		}
		for _, profile := range p.Profiles() {
			want[key{p.Name(), profile}] = p
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, l := range s.loops {
		if _, ok := want[k]; !ok {
			l.cancel()
			delete(s.loops, k)
		}
	}
	for k, p := range want {
		if _, ok := s.loops[k]; ok {
			continue
		}
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		l := &running{cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1)}
		s.loops[k] = l
		go func() {
			defer close(l.done)
			// The loop removes its own entry when it ends (a failed or unloaded plugin), so
			// the next Reconcile (after the file is replaced) starts a new one.
			defer func() {
				s.mu.Lock()
				if s.loops[k] == l {
					delete(s.loops, k)
				}
				s.mu.Unlock()
			}()
			run := func(ctx context.Context) {
				if p.Manifest().Kind == abi.KindScheduler {
					s.tick(ctx, k.plugin, k.profile, l.kick)
				} else {
					s.poll(ctx, k.plugin, k.profile)
				}
			}
			if s.Leases == nil {
				run(lctx)
				return
			}
			// A loop that ends by itself (its plugin failed or was unloaded) ends the
			// campaign and releases the lease: another instance, where the plugin may be
			// healthy, takes it over.
			s.Leases.Campaign(lctx, LeaseName(k.plugin, k.profile), run)
		}()
	}
}

// LeaseName is the lease that elects the instance running plugin's loop for profile.
func LeaseName(plugin, profile string) string { return "loop:" + plugin + "/" + profile }

// Stop cancels every loop and waits for them to return.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	loops := s.loops
	s.loops = map[key]*running{}
	s.mu.Unlock()
	for _, l := range loops {
		l.cancel()
	}
	for _, l := range loops {
		<-l.done
	}
}

// poll calls the plugin's poll export until cancelled, dispatching what it returns. Errors back
// off exponentially (1 s to 1 min); a failed or unloaded plugin ends the loop (a reload starts a
// new one).
//
// Cancelled (the host stops, or another instance took the loop's lease over), a poll in flight
// is stopped: the plugin's instance is closed mid-call (not counted as a crash) and whatever it
// had fetched but not returned is dropped here. Nothing is lost: a plugin confirms a batch to
// its platform only at its next poll (Telegram's offset), so the platform hands the unconfirmed
// updates to the next poller, the new holder. Likewise a batch whose recording the cancellation
// interrupts is polled again by the new holder, and the turn engine's inbox records each
// platform event once (by its id), whichever instance recorded it first. Until the old long poll's connection is closed the platform may refuse the new
// holder's poll (409); the new loop backs off and polls again.
func (s *Supervisor) poll(ctx context.Context, name, profile string) {
	backoff := time.Second
	for ctx.Err() == nil {
		p := s.plugins.Get(name)
		if p == nil {
			return
		}
		res, err := p.Poll(ctx, profile, PollWait)
		if ctx.Err() != nil {
			return
		}
		var failed *plugin.FailedError
		if errors.As(err, &failed) || errors.Is(err, plugin.ErrUnloaded) {
			s.log.Error("poll loop stopped", "plugin", name, "profile", profile, "error", err)
			return
		}
		var wait time.Duration
		if err == nil && len(res.Events) > 0 {
			// The plugin may confirm this batch at its next poll, so poll is not called again
			// until every event of it is recorded.
			caller := p.Caller(profile)
			for retry := time.Second; ; retry = min(retry*2, time.Minute) {
				derr := s.door.DispatchAll(ctx, caller, res.Events)
				if derr == nil || ctx.Err() != nil {
					break
				}
				s.log.Error("recording polled events failed; retrying before polling again", "plugin", name, "profile", profile, "error", derr, "retry", retry)
				sleep(ctx, retry)
			}
		}
		if err != nil {
			s.log.Warn("poll failed; backing off", "plugin", name, "profile", profile, "error", err, "backoff", backoff)
			wait, backoff = backoff, min(backoff*2, time.Minute)
		} else {
			backoff = time.Second
			if len(res.Events) == 0 {
				wait = time.Duration(res.BackoffMs) * time.Millisecond
			}
		}
		if wait > 0 && !sleep(ctx, wait) {
			return
		}
	}
}

// Kick makes a scheduler profile's tick loop tick now (its jobs changed).
func (s *Supervisor) Kick(plugin, profile string) {
	s.mu.Lock()
	l := s.loops[key{plugin, profile}]
	s.mu.Unlock()
	if l != nil {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// tick wakes a scheduler plugin when it asks to be woken (default every minute), or when kicked.
func (s *Supervisor) tick(ctx context.Context, name, profile string, kick <-chan struct{}) {
	for ctx.Err() == nil {
		p := s.plugins.Get(name)
		if p == nil {
			return
		}
		next := DefaultTick
		now := s.Clock.Now()
		res, err := p.Tick(ctx, profile, now)
		var failed *plugin.FailedError
		switch {
		case errors.As(err, &failed) || errors.Is(err, plugin.ErrUnloaded):
			s.log.Error("tick loop stopped", "plugin", name, "profile", profile, "error", err)
			return
		case err != nil:
			s.log.Warn("tick failed", "plugin", name, "profile", profile, "error", err)
		case res.NextTickMs > 0:
			next = time.Duration(res.NextTickMs) * time.Millisecond
		}
		s.Clock.Wait(ctx, now.Add(max(next, 100*time.Millisecond)), kick)
	}
}

// sleep waits for d or ctx, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
