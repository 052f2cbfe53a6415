// Package fakeclock is a clock that moves only when told to, for the platform fakes and for
// tests that cannot run in a testing/synctest bubble (those that wait on real OS processes or
// real sockets, where synctest's clock would not advance).
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a manual clock. Its methods are safe for concurrent use. The zero value starts at
// the zero time; use New for a realistic start.
type Clock struct {
	mu  sync.Mutex
	now time.Time
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
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
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
