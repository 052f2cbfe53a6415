package telegramtest

import (
	"time"

	"github.com/hermes-host/hermes-host/conformance/fakeclock"
)

// Clock tells the fake what time it is (message timestamps, signatures, rate limits).
type Clock = fakeclock.Source

// RealClock is the wall clock.
type RealClock = fakeclock.Real

// ManualClock is a clock that moves only when told to (conformance/fakeclock's).
type ManualClock = fakeclock.Clock

// NewManualClock returns a ManualClock set to t.
func NewManualClock(t time.Time) *ManualClock { return fakeclock.New(t) }

// FloodControl configures the fake's rate limiter, modelled on the Bot FAQ: about one message
// per second per chat (short bursts tolerated) and at most 20 messages per minute to a group.
// sendMessage and editMessageText count; a send over a limit is answered 429 "Too Many
// Requests: retry after N" with parameters.retry_after N (whole seconds, rounded up) and does
// not count.
type FloodControl struct {
	// PerChat is the average spacing of messages to one chat (default 1s).
	PerChat time.Duration
	// Burst is how many messages may go to one chat back to back (default 3).
	Burst int
	// GroupPerMinute caps messages to one group, supergroup or channel in any 60 s window
	// (default 20; negative for no cap).
	GroupPerMinute int
}

// DefaultFloodControl returns the limits of the Bot FAQ: 1/s per chat with a burst of 3, and
// 20/min per group.
func DefaultFloodControl() FloodControl {
	return FloodControl{PerChat: time.Second, Burst: 3, GroupPerMinute: 20}
}

type floodState struct {
	fc      FloodControl
	buckets map[int64]*bucket
	groups  map[int64][]time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newFloodState(fc FloodControl) *floodState {
	if fc.PerChat <= 0 {
		fc.PerChat = time.Second
	}
	if fc.Burst <= 0 {
		fc.Burst = 3
	}
	if fc.GroupPerMinute == 0 {
		fc.GroupPerMinute = 20
	}
	return &floodState{fc: fc, buckets: map[int64]*bucket{}, groups: map[int64][]time.Time{}}
}

// take admits one message to chat at now, or returns how long to wait. Called with s.mu held.
func (f *floodState) take(chatID int64, group bool, now time.Time) time.Duration {
	b := f.buckets[chatID]
	if b == nil {
		b = &bucket{tokens: float64(f.fc.Burst), at: now}
		f.buckets[chatID] = b
	}
	if el := now.Sub(b.at); el > 0 {
		b.tokens = min(float64(f.fc.Burst), b.tokens+float64(el)/float64(f.fc.PerChat))
		b.at = now
	}
	var wait time.Duration
	if b.tokens < 1 {
		wait = time.Duration((1 - b.tokens) * float64(f.fc.PerChat))
	}
	var window []time.Time
	if group && f.fc.GroupPerMinute > 0 {
		for _, t := range f.groups[chatID] {
			if now.Sub(t) < time.Minute {
				window = append(window, t)
			}
		}
		f.groups[chatID] = window
		if len(window) >= f.fc.GroupPerMinute {
			wait = max(wait, window[len(window)-f.fc.GroupPerMinute].Add(time.Minute).Sub(now))
		}
	}
	if wait > 0 {
		return wait
	}
	b.tokens--
	if group {
		f.groups[chatID] = append(window, now)
	}
	return 0
}

// retryAfter rounds a wait up to whole seconds, at least 1.
func retryAfter(d time.Duration) int {
	n := int((d + time.Second - 1) / time.Second)
	return max(n, 1)
}
