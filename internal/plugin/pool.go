package plugin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extism "github.com/extism/go-sdk"

	"github.com/hermes-host/hermes-host/abi"
)

// instance is one live copy of a plugin. It is owned by exactly one goroutine at a time: the
// pool hands it out and takes it back, and nothing else holds a reference.
type instance struct {
	p      *extism.Plugin
	stderr *headBuffer // the guest's stderr, for crash reports (a Go panic prints there)
	// dead is set by wazero when any module of the instance closes: the guest called
	// proc_exit (even with status 0), a deadline stopped it, or the host closed it. A dead
	// instance never runs code again; exitCode is the status it closed with.
	dead     atomic.Bool
	exitCode atomic.Uint32
	mem      *instanceMemory // how far its memories have grown
	// started: a call has run on it, so the guest's runtime has started (version.start). Only
	// the goroutine holding the instance reads or writes it.
	started bool
	// idleSince is when it was last put back; guarded by the pool's mu while idle.
	idleSince time.Time
}

// CloseNotify implements wazero's experimental.CloseNotifier for the instance's modules.
func (i *instance) CloseNotify(_ context.Context, exitCode uint32) {
	i.exitCode.Store(exitCode)
	i.dead.Store(true)
}

func (i *instance) close() { i.p.Close(context.Background()) }

// class is the kind of call an instance is taken for. Each class has its own share of a
// plugin's instances, so one kind of call can never take the instances another needs: sends
// spinning on a slow platform cannot delay the webhook the same platform is waiting on.
type class int

const (
	classOut class = iota // send, tick, describe, configure
	classIn               // webhook and poll: inbound traffic
	numClasses
)

func classOf(export string) class {
	if export == abi.ExportWebhook || export == abi.ExportPoll {
		return classIn
	}
	return classOut
}

// pool is a bounded set of instances of one plugin version. An instance is not bound to a
// class: an idle one serves whichever call comes. What is bounded per class is how many calls
// of that class hold an instance at once, so at most the sum of the class maxima exist.
type pool struct {
	create func(context.Context) (*instance, error)
	max    [numClasses]int

	mu    sync.Mutex
	idle  []*instance // the most recently used last
	busy  [numClasses]int
	total int // instances that exist, idle or busy
	// keep[c] idle instances are left for class c alone: the other classes create their own
	// rather than take them.
	keep    [numClasses]int
	changed chan struct{} // closed and replaced when an instance or a slot is released
	closed  bool
	// lastActive is when the last call other than a tick returned its instance (or the pool
	// was made). A pool whose lastActive is older than its ColdTimeout is cold: see trim and
	// putAfterTick.
	lastActive time.Time
	cold       time.Duration // the plugin's ColdTimeout; 0 until set
}

var errPoolClosed = errors.New("plugin version unloaded")

func newPool(max [numClasses]int, create func(context.Context) (*instance, error)) *pool {
	return &pool{create: create, max: max, changed: make(chan struct{}), lastActive: time.Now()}
}

// setCold sets the plugin's ColdTimeout.
func (p *pool) setCold(d time.Duration) {
	p.mu.Lock()
	p.cold = d
	p.mu.Unlock()
}

// coldLocked reports whether no call but ticks has run for the ColdTimeout. p.mu is held.
func (p *pool) coldLocked(now time.Time) bool {
	return p.cold > 0 && now.Sub(p.lastActive) > p.cold
}

// get returns an idle instance, or creates one, or waits until the class has a free slot.
func (p *pool) get(ctx context.Context, c class) (*instance, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		if p.busy[c] < p.max[c] {
			p.busy[c]++
			if n := len(p.idle); n > p.keptFor(c) {
				inst := p.idle[n-1]
				p.idle = p.idle[:n-1]
				p.mu.Unlock()
				return inst, nil
			}
			// Every instance that exists is busy or kept for another class. Kept ones count
			// against that class's slots (keep never exceeds them), so fewer than the sum of
			// the maxima exist, and one more may be created.
			p.total++
			p.mu.Unlock()
			inst, err := p.create(ctx)
			if err != nil {
				p.release(c, true)
				return nil, err
			}
			return inst, nil
		}
		wait := p.changed
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// setMax changes the class maxima (once the plugin's own limits are known).
func (p *pool) setMax(max [numClasses]int) {
	p.mu.Lock()
	p.max = max
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// reserveIdle keeps n idle instances for class c alone (at most its slots).
func (p *pool) reserveIdle(c class, n int) {
	p.mu.Lock()
	p.keep[c] = min(n, p.max[c])
	p.mu.Unlock()
}

// keptFor is how many idle instances class c may not take. Called with p.mu held.
func (p *pool) keptFor(c class) int {
	n := 0
	for other := range numClasses {
		if other != c {
			n += max(0, p.keep[other]-p.busy[other])
		}
	}
	return n
}

// release frees c's slot and, if gone, the instance's place in the pool. Called with p.mu not held.
func (p *pool) release(c class, gone bool) {
	p.mu.Lock()
	p.busy[c]--
	if gone {
		p.total--
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// put returns a healthy instance after a call, which makes the pool active. After close, the
// instance is closed instead.
func (p *pool) put(inst *instance, c class) { p.putBack(inst, c, true) }

// putAfterTick returns an instance after a tick, which does not make the pool active: a cold
// plugin that only its timer wakes (cron with nothing due ticks every minute) closes the
// instance instead of keeping it idle until the next tick. It reports whether it closed it.
func (p *pool) putAfterTick(inst *instance, c class) (closed bool) { return p.putBack(inst, c, false) }

func (p *pool) putBack(inst *instance, c class, active bool) (closed bool) {
	now := time.Now()
	p.mu.Lock()
	if active {
		p.lastActive = now
	}
	if p.closed || p.coldLocked(now) {
		p.mu.Unlock()
		inst.close()
		p.release(c, true)
		return true
	}
	inst.idleSince = now
	p.idle = append(p.idle, inst)
	p.mu.Unlock()
	p.release(c, false)
	return false
}

// discard closes an instance that must not be reused (it crashed, a host function panicked
// under it, or it grew too large) and frees its place.
func (p *pool) discard(inst *instance, c class) {
	inst.close()
	p.release(c, true)
}

// trim closes idle instances unused since before cutoff, keeping the keep most recently used
// (and those reserved for a class). It returns how many it closed.
//
// A cold pool (no call but ticks for its ColdTimeout) with no call in progress keeps none,
// however recently a tick used them: a plugin nobody has called for that long gives all its
// memory back, and its next call starts an instance.
func (p *pool) trim(cutoff time.Time, keep int) int {
	p.mu.Lock()
	for c := range numClasses {
		keep += p.keep[c]
	}
	cold := len(p.idle) == p.total && p.coldLocked(time.Now())
	if cold {
		keep = 0
	}
	var victims []*instance
	kept := p.idle[:0]
	for i, inst := range p.idle {
		if cold || i < len(p.idle)-keep && inst.idleSince.Before(cutoff) {
			victims = append(victims, inst)
			continue
		}
		kept = append(kept, inst)
	}
	p.idle = kept
	p.total -= len(victims)
	p.mu.Unlock()
	for _, inst := range victims {
		inst.close()
	}
	return len(victims)
}

// size reports how many instances exist.
func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// close closes the idle instances now and busy ones as they come back.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.total -= len(idle)
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, inst := range idle {
		inst.close()
	}
}

// headBuffer keeps the first max bytes written to it since the last take: a Go guest prints
// the reason for a crash ("panic: …", "fatal error: out of memory") before its stack traces.
type headBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (h *headBuffer) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.buf); room > 0 {
		h.buf = append(h.buf, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

// take returns what was written since the last take, up to the end of the first goroutine's
// stack trace, and resets the buffer.
func (h *headBuffer) take() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := string(h.buf)
	h.buf = h.buf[:0]
	if i := strings.Index(s, "\n\ngoroutine "); i >= 0 {
		if j := strings.Index(s[i+2:], "\n\n"); j >= 0 {
			s = s[:i+2+j]
		}
	}
	return s
}
