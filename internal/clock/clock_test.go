package clock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
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

	// Wait returns once the file reaches the time, and not before.
	until := time.Date(2026, 6, 10, 13, 0, 0, 0, time.UTC)
	done := make(chan struct{})
	go func() { c.Wait(context.Background(), until, nil); close(done) }()
	select {
	case <-done:
		t.Fatal("Wait returned before the clock reached the time")
	case <-time.After(50 * time.Millisecond):
	}
	os.WriteFile(path, []byte("2026-06-10T13:00:00Z"), 0o644)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the clock moved")
	}
	// A wake-up ends a wait early.
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	c.Wait(context.Background(), until.Add(time.Hour), wake)
}

// The project's one fake clock stands for the host clock in tests (lease holders, tick loops).
var _ Clock = (*fakeclock.Clock)(nil)
