package process

import (
	"fmt"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/internal/session"
)

// Watch limits (reference: hermes-gateway §2 and §8). They are variables only so that tests
// in this package can read them by name; nothing changes them.
var (
	watchWindow       = 15 * time.Second // at most one delivered match per window per process
	watchMaxStrikes   = 3                // consecutive windows with suppressed matches → disabled
	watchMaxLifetime  = 8                // delivered matches per process → disabled
	globalWindow      = 10 * time.Second
	globalMaxInWindow = 15 // more than this many matches in globalWindow trips the breaker
	globalCooldown    = 30 * time.Second
)

// watchLimiter is the per-process rate limit. A delivered match opens a window of watchWindow;
// further matches inside it are suppressed (counted, and reported with the next delivered match),
// and a window with suppressed matches is a strike. A window that closes without suppressions
// resets the strike count. It is a pure function of the times it is given, guarded by the owning
// process's mutex.
type watchLimiter struct {
	windowEnd  time.Time
	struck     bool // the current window has had a suppressed match
	strikes    int  // consecutive struck windows
	delivered  int  // lifetime delivered matches
	suppressed int  // suppressed since the last delivered match
}

// verdict of one offered match.
type verdict int

const (
	deliverMatch verdict = iota
	suppressMatch
	disableWatch // suppressed, and the strike limit is reached
)

// offer decides on a match seen at now, before the global breaker is consulted. It does not
// count the match as delivered; call delivered for that once the breaker admitted it.
func (w *watchLimiter) offer(now time.Time) verdict {
	if !w.windowEnd.IsZero() && now.Before(w.windowEnd) {
		w.suppressed++
		if !w.struck {
			w.struck = true
			w.strikes++
			if w.strikes >= watchMaxStrikes {
				return disableWatch
			}
		}
		return suppressMatch
	}
	if !w.windowEnd.IsZero() && !w.struck {
		w.strikes = 0 // the previous window closed clean
	}
	return deliverMatch
}

// deliver records a delivered match at now and returns how many were suppressed before it and
// whether the lifetime cap is now reached.
func (w *watchLimiter) deliver(now time.Time) (suppressedBefore int, capped bool) {
	suppressedBefore = w.suppressed
	w.suppressed = 0
	w.windowEnd = now.Add(watchWindow)
	w.struck = false
	w.delivered++
	return suppressedBefore, w.delivered >= watchMaxLifetime
}

// breaker is the global watch breaker: more than globalMaxInWindow delivered matches within
// globalWindow, across all processes, trips it; for globalCooldown every match is dropped; then
// it releases. Each trip produces exactly one tripped and one released event.
type breaker struct {
	mu       sync.Mutex // guards everything below; taken after a process mutex, never before
	recent   []time.Time
	tripped  bool
	until    time.Time
	dropped  int
	tripProc tripOrigin // the process whose match tripped it, for routing the events
}

type tripOrigin struct {
	id, command string
	stamp       session.Stamp
	startedAt   time.Time
}

// blocked reports whether matches are being dropped at now; a drop is counted.
func (b *breaker) blocked(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tripped && now.Before(b.until) {
		b.dropped++
		return true
	}
	return false
}

// admit counts a match about to be delivered. If it is one too many, the breaker trips, the
// match is dropped and the tripped event is returned.
func (b *breaker) admit(now time.Time, origin tripOrigin) (ok bool, tripped *Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tripped { // cooldown over but the release not yet emitted: blocked() said go ahead
		return true, nil
	}
	cut := now.Add(-globalWindow)
	i := 0
	for i < len(b.recent) && !b.recent[i].After(cut) {
		i++
	}
	b.recent = append(b.recent[:0], b.recent[i:]...)
	if len(b.recent) >= globalMaxInWindow {
		b.tripped, b.until, b.dropped, b.tripProc = true, now.Add(globalCooldown), 1, origin
		b.recent = b.recent[:0]
		ev := origin.event(EventOverflowTripped, now)
		ev.Message = fmt.Sprintf("More than %d watch-pattern matches within %s across background processes: "+
			"watch notifications are paused for %s.", globalMaxInWindow, globalWindow, globalCooldown)
		return false, &ev
	}
	b.recent = append(b.recent, now)
	return true, nil
}

// release ends a trip whose cooldown has passed at now, returning the released event once.
func (b *breaker) release(now time.Time) *Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.tripped || now.Before(b.until) {
		return nil
	}
	b.tripped = false
	ev := b.tripProc.event(EventOverflowRelease, now)
	ev.Message = fmt.Sprintf("Watch notifications resumed; %d matches were dropped while paused.", b.dropped)
	b.dropped = 0
	return &ev
}

func (o tripOrigin) event(kind EventKind, now time.Time) Event {
	return Event{Kind: kind, ProcID: o.id, Command: o.command, Stamp: o.stamp, StartedAt: o.startedAt, At: now}
}
