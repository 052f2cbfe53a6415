package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

type loopKey struct{ plugin, profile string }

type loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// reconcileLoops starts a poll loop for every serving profile of a polling plugin and a tick
// loop for every profile of a scheduler, and stops loops whose plugin or profile is gone.
func (g *Gateway) reconcileLoops(ctx context.Context) {
	want := map[loopKey]*plugin.Plugin{}
	for _, p := range g.runtime.Plugins() {
		m := p.Manifest()
		if !m.Has(abi.CapPoll) && m.Kind != abi.KindScheduler {
			continue
		}
		for _, profile := range p.Profiles() {
			want[loopKey{p.Name(), profile}] = p
		}
	}
	g.loopsMu.Lock()
	defer g.loopsMu.Unlock()
	for k, l := range g.loops {
		if _, ok := want[k]; !ok {
			l.cancel()
			delete(g.loops, k)
		}
	}
	for k, p := range want {
		if _, ok := g.loops[k]; ok {
			continue
		}
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		l := &loop{cancel: cancel, done: make(chan struct{})}
		g.loops[k] = l
		go func() {
			defer close(l.done)
			if p.Manifest().Kind == abi.KindScheduler {
				g.tickLoop(lctx, k.plugin, k.profile)
			} else {
				g.pollLoop(lctx, k.plugin, k.profile)
			}
		}()
	}
}

func (g *Gateway) stopLoops() {
	g.loopsMu.Lock()
	loops := g.loops
	g.loops = map[loopKey]*loop{}
	g.loopsMu.Unlock()
	for _, l := range loops {
		l.cancel()
	}
	for _, l := range loops {
		<-l.done
	}
}

const pollWait = 25 * time.Second

// pollLoop calls the plugin's poll export until cancelled, dispatching what it returns. Errors
// back off exponentially (1 s to 1 min); a failed or unloaded plugin ends the loop (a reload
// starts a new one).
func (g *Gateway) pollLoop(ctx context.Context, name, profile string) {
	backoff := time.Second
	for ctx.Err() == nil {
		p := g.runtime.Get(name)
		if p == nil {
			return
		}
		res, err := p.Poll(ctx, profile, pollWait)
		if ctx.Err() != nil {
			return
		}
		var failed *plugin.FailedError
		if errors.As(err, &failed) || errors.Is(err, plugin.ErrUnloaded) {
			g.log.Error("poll loop stopped", "plugin", name, "profile", profile, "error", err)
			return
		}
		var wait time.Duration
		if err == nil && len(res.Events) > 0 {
			// The plugin may confirm this batch at its next poll, so poll is not called again
			// until every event of it is recorded.
			caller := plugin.Caller{Plugin: name, Kind: p.Manifest().Kind, Platform: p.Manifest().Platform, Profile: profile}
			for retry := time.Second; ; retry = min(retry*2, time.Minute) {
				derr := g.dispatch(ctx, caller, res.Events)
				if derr == nil || ctx.Err() != nil {
					break
				}
				g.log.Error("recording polled events failed; retrying before polling again", "plugin", name, "profile", profile, "error", derr, "retry", retry)
				select {
				case <-ctx.Done():
				case <-time.After(retry):
				}
			}
		}
		if err != nil {
			g.log.Warn("poll failed; backing off", "plugin", name, "profile", profile, "error", err, "backoff", backoff)
			wait, backoff = backoff, min(backoff*2, time.Minute)
		} else {
			backoff = time.Second
			if len(res.Events) == 0 {
				wait = time.Duration(res.BackoffMs) * time.Millisecond
			}
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}

const defaultTick = time.Minute

// tickLoop wakes a scheduler plugin when it asks to be woken (default every minute).
func (g *Gateway) tickLoop(ctx context.Context, name, profile string) {
	for ctx.Err() == nil {
		p := g.runtime.Get(name)
		if p == nil {
			return
		}
		next := defaultTick
		res, err := p.Tick(ctx, profile, time.Now())
		var failed *plugin.FailedError
		switch {
		case errors.As(err, &failed) || errors.Is(err, plugin.ErrUnloaded):
			g.log.Error("tick loop stopped", "plugin", name, "profile", profile, "error", err)
			return
		case err != nil:
			g.log.Warn("tick failed", "plugin", name, "profile", profile, "error", err)
		case res.NextTickMs > 0:
			next = time.Duration(res.NextTickMs) * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(next, 100*time.Millisecond)):
		}
	}
}
