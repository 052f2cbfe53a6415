package fakeclock_test

import (
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/fakeclock"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// waitingIs waits (on the clock's own count, not on time) until n goroutines wait in Wait.
func waitingIs(t *testing.T, c *fakeclock.Clock, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); c.Waiting() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines wait on the clock, want %d", c.Waiting(), n)
		}
	}
}

// Wait returns when the clock reaches the time, not before; Waiting counts the waiters still
// ahead of the clock, so the test knows the waiter is parked before it moves the clock.
func TestWait(t *testing.T) {
	c := fakeclock.New(t0)
	done := make(chan struct{})
	go func() { c.Wait(context.Background(), t0.Add(time.Minute), nil); close(done) }()
	waitingIs(t, c, 1)
	c.Advance(59 * time.Second)
	waitingIs(t, c, 1) // moved, looked, still ahead: waiting again
	select {
	case <-done:
		t.Fatal("Wait returned before the clock reached its time")
	default:
	}
	c.Advance(time.Second)
	<-done
	if n := c.Waiting(); n != 0 {
		t.Fatalf("%d waiters after the time passed", n)
	}
	// A time already reached returns at once, the zero value included.
	var zero fakeclock.Clock
	zero.Wait(context.Background(), time.Time{}, nil)
	c.Wait(context.Background(), t0, nil)
}

// Wait also ends on a wake and on the context, with the time still ahead.
func TestWaitWakeAndContext(t *testing.T) {
	c := fakeclock.New(t0)
	wake := make(chan struct{})
	done := make(chan struct{})
	go func() { c.Wait(context.Background(), t0.Add(time.Hour), wake); close(done) }()
	wake <- struct{}{}
	<-done
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { c.Wait(ctx, t0.Add(time.Hour), nil); close(done) }()
	waitingIs(t, c, 1)
	cancel()
	<-done
	// Set moves the clock either way; a waiter sees the time it was set to.
	c.Set(t0.Add(-time.Hour))
	if got := c.Now(); !got.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("now %v", got)
	}
}
