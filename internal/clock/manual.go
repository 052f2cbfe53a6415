package clock

import (
	"context"
	"sync"
	"time"
)

// Manual is a clock that moves only when told (Set, Advance), for tests of code that waits on a
// Clock: the test drives time and its waiters wake when time passes what they wait for.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	changed chan struct{} // closed and replaced when the time moves
	waiters map[*time.Time]struct{}
}

// NewManual returns a Manual clock reading t.
func NewManual(t time.Time) *Manual {
	return &Manual{now: t, changed: make(chan struct{}), waiters: map[*time.Time]struct{}{}}
}

// Now implements Clock.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the clock forward by d.
func (m *Manual) Advance(d time.Duration) { m.Set(m.Now().Add(d)) }

// Set moves the clock to t (never backwards: an earlier t is ignored).
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.After(m.now) {
		m.now = t
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

// Waiting is how many goroutines wait in Wait for a time still ahead. A test that has moved the
// clock waits until Waiting is back to what it expects, and then knows that every waiter due
// has run its turn and is waiting again.
func (m *Manual) Waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for t := range m.waiters {
		if t.After(m.now) {
			n++
		}
	}
	return n
}

// Wait implements Clock.
func (m *Manual) Wait(ctx context.Context, t time.Time, wake <-chan struct{}) {
	m.mu.Lock()
	m.waiters[&t] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiters, &t)
		m.mu.Unlock()
	}()
	for {
		m.mu.Lock()
		now, changed := m.now, m.changed
		m.mu.Unlock()
		if !now.Before(t) {
			return
		}
		select {
		case <-changed:
		case <-wake:
			return
		case <-ctx.Done():
			return
		}
	}
}
