// Package change wakes what waits for a platform fake's state to change: tests waiting for a
// condition, and the fake's own delivery loops.
package change

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by Wait when the fake closed before the condition held.
var ErrClosed = errors.New("closed")

// Signal is a broadcast: Notify closes the channel every C before it returned. The fake guards
// it with its own mutex (Notify and C are called with that mutex held). The zero value is ready.
type Signal struct{ ch chan struct{} }

// C returns a channel that the next Notify closes.
func (s *Signal) C() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Notify wakes everything that took C before.
func (s *Signal) Notify() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// Wait returns nil once cond holds, evaluating it (without mu) at once and after every Notify
// of s. When ctx ends or done closes first, cond is evaluated once more; then Wait returns ctx's
// error or ErrClosed.
func Wait(ctx context.Context, mu sync.Locker, s *Signal, done <-chan struct{}, cond func() bool) error {
	for {
		mu.Lock()
		ch := s.C()
		mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if cond() {
				return nil
			}
			return ctx.Err()
		case <-done:
			if cond() {
				return nil
			}
			return ErrClosed
		}
	}
}
