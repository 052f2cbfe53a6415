// Package fakeclock is the project's one fake clock: a clock that moves only when told to, for
// the platform fakes and for tests that cannot run in a testing/synctest bubble (those that wait
// on real OS processes or real sockets, where synctest's clock would not advance). A *Clock is
// also a host clock (the host's internal clock.Clock: Now and Wait), so a test drives the
// host's lease holders and tick loops with the same clock it drives a fake with.
package fakeclock

import (
	"context"
	"sync"
	"time"
)

// Clock is a manual clock. Its methods are safe for concurrent use. The zero value starts at
// the zero time; use New for a realistic start.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	changed chan struct{}           // closed and replaced when the time moves; nil until a Wait
	waiters map[*time.Time]struct{} // the times goroutines in Wait wait for
}

// New returns a clock set to t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.move(c.now.Add(d))
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.move(t)
}

// move sets the time and wakes the goroutines in Wait to look at it. c.mu is held.
func (c *Clock) move(t time.Time) {
	c.now = t
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// Wait returns when the clock reaches t (at once if it has), when wake receives, or when ctx
// ends. It is the Wait of the host's clock, so a Clock can stand for the host's.
func (c *Clock) Wait(ctx context.Context, t time.Time, wake <-chan struct{}) {
	c.mu.Lock()
	if c.waiters == nil {
		c.waiters = map[*time.Time]struct{}{}
	}
	c.waiters[&t] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, &t)
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		if !c.now.Before(t) {
			c.mu.Unlock()
			return
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-wake:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Waiting is how many goroutines wait in Wait for a time still ahead. A test that has moved the
// clock waits until Waiting is back to what it expects, and then knows that every waiter due
// has run its turn and is waiting again.
func (c *Clock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for t := range c.waiters {
		if t.After(c.now) {
			n++
		}
	}
	return n
}

// Ahead is a clock that runs with the real one, ahead of it by what Advance added: for code that
// must see time pass while it waits on real sockets (a plugin's poll loop), yet must reach a
// timer 30 s away without the test waiting for it. Its methods are safe for concurrent use.
type Ahead struct {
	mu  sync.Mutex
	off time.Duration
}

// Now returns the real time plus the offset.
func (a *Ahead) Now() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Now().Add(a.off)
}

// Advance moves the clock forward by d.
func (a *Ahead) Advance(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.off += d
}

// Source is what the platform fakes ask for the time: *Clock, *Ahead or Real.
type Source interface {
	Now() time.Time
}

// Real is the wall clock, for fakes that need no control over time.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }
