// Package clock is the host clock that plugins read (hermes_clock, tick's unix_ms) and that the
// scheduler tick loops sleep on. The real clock is the default. A file clock (serve
// --test-clock FILE, for tests only) reads the time from a file, so an end-to-end test can move
// a running host through a day of schedules without waiting: it writes a new time, and every
// tick loop due by then wakes within milliseconds.
//
// Only what plugins see follows a file clock. The host's own timestamps (sessions, the delivery
// ledger and its retry backoff, process checkpoints) stay on the real clock.
package clock

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Clock tells the time and sleeps until a time.
type Clock interface {
	Now() time.Time
	// Wait returns when the clock reaches t, when wake receives, or when ctx ends.
	Wait(ctx context.Context, t time.Time, wake <-chan struct{})
}

// Real is the system clock.
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// Wait implements Clock.
func (Real) Wait(ctx context.Context, t time.Time, wake <-chan struct{}) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-wake:
	case <-ctx.Done():
	}
}

// File is a clock whose time is the content of a file: Unix milliseconds, or an RFC 3339 time.
// A file that cannot be read or parsed keeps the last good time.
type File struct {
	path string
	poll time.Duration

	mu   sync.Mutex
	last time.Time
}

// NewFile returns the clock of the file at path, which must exist and hold a time.
func NewFile(path string) (*File, error) {
	f := &File{path: path, poll: 10 * time.Millisecond}
	t, err := f.read()
	if err != nil {
		return nil, fmt.Errorf("test clock: %w", err)
	}
	f.last = t
	return f, nil
}

func (f *File) read() (time.Time, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return time.Time{}, err
	}
	s := strings.TrimSpace(string(b))
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s holds %q: want Unix milliseconds or an RFC 3339 time", f.path, s)
	}
	return t, nil
}

// Now implements Clock.
func (f *File) Now() time.Time {
	t, err := f.read()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.last = t
	}
	return f.last
}

// Wait implements Clock: it polls the file until its time reaches t.
func (f *File) Wait(ctx context.Context, t time.Time, wake <-chan struct{}) {
	tick := time.NewTicker(f.poll)
	defer tick.Stop()
	for f.Now().Before(t) {
		select {
		case <-tick.C:
		case <-wake:
			return
		case <-ctx.Done():
			return
		}
	}
}
