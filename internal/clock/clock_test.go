package clock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/conformance/fakeclock"
)

func TestFileClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	if _, err := NewFile(path); err == nil {
		t.Fatal("a missing file made a clock")
	}
	os.WriteFile(path, []byte("1781092800000\n"), 0o644)
	c, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Now(); got.UnixMilli() != 1781092800000 {
		t.Fatalf("now %v", got)
	}
	os.WriteFile(path, []byte("2026-06-10T12:05:00Z"), 0o644)
	if got := c.Now().UTC().Format(time.RFC3339); got != "2026-06-10T12:05:00Z" {
		t.Fatalf("now %v", got)
	}
	os.WriteFile(path, []byte("garbage"), 0o644)
	if got := c.Now().UTC().Format(time.RFC3339); got != "2026-06-10T12:05:00Z" {
		t.Fatalf("a bad file changed the time: %v", got)
	}

	// A wake-up ends a wait early.
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	c.Wait(context.Background(), time.Date(2026, 6, 10, 14, 0, 0, 0, time.UTC), wake)
}

// Wait returns once the file reaches the time, and not before. In a synctest bubble a second of
// the poll ticker passes at once: "not before" is a hundred polls that each found the time
// still ahead, not a sleep that hopes to be long enough.
func TestFileClockWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "clock")
		os.WriteFile(path, []byte("2026-06-10T12:05:00Z"), 0o644)
		c, err := NewFile(path)
		if err != nil {
			t.Fatal(err)
		}
		until := time.Date(2026, 6, 10, 13, 0, 0, 0, time.UTC)
		done := make(chan struct{})
		go func() { c.Wait(context.Background(), until, nil); close(done) }()
		time.Sleep(time.Second)
		synctest.Wait() // the waiter has polled and is parked on its ticker again
		select {
		case <-done:
			t.Fatal("Wait returned before the clock reached the time")
		default:
		}
		os.WriteFile(path, []byte("2026-06-10T13:00:00Z"), 0o644)
		<-done // the next poll sees it
	})
}

// The project's one fake clock stands for the host clock in tests (lease holders, tick loops).
var _ Clock = (*fakeclock.Clock)(nil)
