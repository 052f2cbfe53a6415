package turn

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
)

// floodOnce makes the chat platform answer the next send with retry_after: the message stays
// pending in the ledger (its lane blocked) for that long, without holding the chat's boundary.
func (c *chatPlatform) floodOnce(after time.Duration) {
	c.mu.Lock()
	c.flood = after
	c.mu.Unlock()
}

// TestReplyPendingWhenCompressing: the answer of a finished turn waits in the ledger (flood
// control) while /compress runs; it is then delivered once, into the continuation.
func TestReplyPendingWhenCompressing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
		h.chat.floodOnce(30 * time.Second)
		first := h.say(dm, "hello there")
		until(t, "the answer refused with retry_after", func() bool {
			return len(h.rowsWith(delivery.Pending, "I understood")) == 1 && h.chat.refused() == 1
		})
		h.say(dm, "/compress")
		until(t, "/compress", func() bool { return h.current(dm).SessionID != first.Session.SessionID })
		cont := h.current(dm)
		if len(h.rowsWith(delivery.Pending, "I understood")) != 1 {
			t.Fatal("the answer was not pending while /compress ran")
		}
		time.Sleep(31 * time.Second) // the flood wait passes
		synctest.Wait()
		row := h.finalRow(delivery.Delivered, "I understood")
		if row.SessionID != cont.SessionID {
			t.Fatalf("delivered into %s, continuation is %s", row.SessionID, cont.SessionID)
		}
		if n := h.chat.count("I understood"); n != 1 {
			t.Fatalf("the answer reached the chat %d times: %q", n, h.chat.texts())
		}
		h.inboxOutcome(first.Session.Key, "hello there", stDone, "answered dlv_")
	})
}

// TestReplyPendingWhenNew: the same with /new instead: the answer is dropped, recorded with the
// reason, and never reaches the chat.
func TestReplyPendingWhenNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
		h.chat.floodOnce(30 * time.Second)
		h.say(dm, "hello there")
		until(t, "the answer refused", func() bool { return h.chat.refused() == 1 })
		h.say(dm, "/new")
		time.Sleep(31 * time.Second)
		synctest.Wait()
		row := h.finalRow(delivery.Dropped, "I understood")
		if !strings.Contains(row.Reason, "stale: "+"user_boundary") {
			t.Fatalf("drop reason %q", row.Reason)
		}
		if n := h.chat.count("I understood"); n != 0 {
			t.Fatalf("the answer of the left conversation reached the chat: %q", h.chat.texts())
		}
		h.chat.waitFor(t, "the /new confirmation", has("New conversation"))
	})
}

// TestNotificationQueuedWhenCompressing: a completion whose notification turn is queued behind
// /compress (the chat was busy when the process ended) is answered once, in the continuation.
// Variants: the notification turn's answer, and a text-mode notice, pending in the ledger while
// /compress runs.
func TestNotificationQueuedWhenCompressing(t *testing.T) {
	t.Run("turn-queued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := newBlocking()
			h := newHarness(t, a, Options{})
			h.say(dm, "busy")
			a.next(t) // the foreground turn holds the chat
			h.say(dm, "/compress")
			p := h.spawn(dm, "echo queued-for-compression", true)
			h.eventDone(p.ID) // the notification turn is queued behind /compress
			a.release <- "busy answer"
			synth := a.next(t) // after /compress ran
			if !synth.Synthetic || synth.SessionID != h.current(dm).SessionID {
				t.Fatalf("notification turn %+v on %s", synth, h.current(dm).SessionID)
			}
			a.release <- "job summary"
			synctest.Wait()
			h.deliveredOnceInto(p.ID, "job summary", h.current(dm).SessionID)
		})
	})
	t.Run("answer-pending", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h, p := answerPending(t, "echo pending-answer-job")
			before := h.current(dm).SessionID
			h.say(dm, "/compress")
			until(t, "/compress", func() bool { return h.current(dm).SessionID != before })
			time.Sleep(31 * time.Second)
			synctest.Wait()
			h.deliveredOnceInto(p.ID, "job summary", h.current(dm).SessionID)
		})
	})
	t.Run("notice-pending", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
			h.say(dm, "hi")
			until(t, "the first answer", func() bool { return h.chat.count("I understood") == 1 })
			h.chat.floodOnce(30 * time.Second)
			h.spawn(dm, "echo text-notice-job", false)
			until(t, "the notice refused", func() bool { return h.chat.refused() == 1 })
			before := h.current(dm).SessionID
			h.say(dm, "/compress")
			until(t, "/compress", func() bool { return h.current(dm).SessionID != before })
			time.Sleep(31 * time.Second)
			synctest.Wait()
			row := h.finalRow(delivery.Delivered, "Done")
			if row.SessionID != h.current(dm).SessionID || h.chat.count("Done") != 1 {
				t.Fatalf("notice %+v, chat %q", row, h.chat.texts())
			}
		})
	})
}

// TestNotificationQueuedWhenNew: the same with /new: the queued notification turn is dropped in
// the same transaction as the /new, with a ledger record; an answer pending in the ledger is
// dropped at its send. Exactly one record each, nothing in the chat.
func TestNotificationQueuedWhenNew(t *testing.T) {
	t.Run("turn-queued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := newBlocking()
			h := newHarness(t, a, Options{})
			h.say(dm, "busy")
			a.next(t)
			p := h.spawn(dm, "echo dropped-by-new", true)
			h.eventDone(p.ID)
			h.say(dm, "/new")
			<-a.cancelled
			h.droppedOnce(p.ID, "cancelled by /new before it ran")
			h.inboxOutcome(h.key(dm), "busy", stInterrupted, "interrupted by /new")
		})
	})
	t.Run("turn-running", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := newBlocking()
			h := newHarness(t, a, Options{})
			h.say(dm, "hi")
			a.next(t)
			a.release <- "hello"
			p := h.spawn(dm, "echo running-when-new", true)
			a.next(t)
			h.say(dm, "/new")
			<-a.cancelled
			h.droppedOnce(p.ID, "interrupted by /new")
		})
	})
	t.Run("answer-pending", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h, p := answerPending(t, "echo answer-pending-new")
			h.say(dm, "/new")
			time.Sleep(31 * time.Second)
			synctest.Wait()
			row := h.finalRow(delivery.Dropped, "job summary")
			if !strings.Contains(row.Reason, "stale:") || h.chat.count("job summary") != 0 {
				t.Fatalf("row %+v, chat %q", row, h.chat.texts())
			}
			h.noOtherRecord(p.ID)
		})
	})
}

// until lets the bubble run until cond holds. synctest.Wait alone is not enough: a goroutine
// waiting for SQLite's write lock sleeps in the busy handler on the bubble's clock, which counts
// as durably blocked; advancing the clock in small steps lets it go on.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 20000 {
		synctest.Wait()
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// answerPending sets up a notification turn whose answer ("job summary") is pending in the
// ledger: the process cmd ended, its notification turn answered, and the platform refused the
// send with retry_after.
func answerPending(t *testing.T, cmd string) (*harness, process.SpawnResult) {
	a := newBlocking()
	h := newHarness(t, a, Options{})
	h.say(dm, "hi")
	a.next(t)
	a.release <- "hello"
	synctest.Wait()
	p := h.spawn(dm, cmd, true)
	a.next(t) // the notification turn runs
	h.chat.floodOnce(30 * time.Second)
	a.release <- "job summary"
	until(t, "the answer refused", func() bool { return h.chat.refused() == 1 })
	return h, p
}

// rowsWith returns the ledger rows in state whose text contains sub, as observed.
func (h *harness) rowsWith(state delivery.State, sub string) []delivery.Row {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []delivery.Row
	for _, r := range h.rows {
		if r.State == state && strings.Contains(r.Target.Text, sub) {
			out = append(out, r)
		}
	}
	return out
}

// inboxOutcome checks the inbox row of key whose text is text.
func (h *harness) inboxOutcome(key, text, state, outcome string) {
	h.t.Helper()
	var st, out string
	until(h.t, "the inbox row of "+text+" to be final", func() bool {
		err := h.e.db.QueryRow(`SELECT state, outcome FROM turn_inbox WHERE session_key = $1 AND text = $2 ORDER BY rowid DESC LIMIT 1`,
			key, text).Scan(&st, &out)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			h.t.Fatal(err)
		}
		return st != stReceived && st != stQueued && st != stRunning && st != ""
	})
	if st != state || !strings.Contains(out, outcome) {
		h.t.Fatalf("inbox row %q: %s %q; want %s %q", text, st, out, state, outcome)
	}
}

// deliveredOnceInto checks that the notification of proc reached the chat once (text), into
// session, and that nothing about it was dropped.
func (h *harness) deliveredOnceInto(proc, text, session string) {
	h.t.Helper()
	row := h.finalRow(delivery.Delivered, text)
	if row.SessionID != session {
		h.t.Fatalf("delivered into %s, want the continuation %s", row.SessionID, session)
	}
	if n := h.chat.count(text); n != 1 {
		h.t.Fatalf("%q reached the chat %d times", text, n)
	}
	if d := h.rowsWith(delivery.Dropped, proc); len(d) != 0 {
		h.t.Fatalf("also dropped: %+v", d)
	}
}

// droppedOnce checks that proc's notification has exactly one drop record, with reason, and
// never reached the chat.
func (h *harness) droppedOnce(proc, reason string) {
	h.t.Helper()
	var drops []delivery.Row
	until(h.t, "the drop record of "+proc, func() bool {
		rows, err := h.ledger.List(context.Background(), delivery.Filter{})
		if err != nil {
			h.t.Fatal(err)
		}
		drops = drops[:0]
		for _, r := range rows {
			if r.Origin == proc {
				if r.State != delivery.Dropped {
					h.t.Fatalf("a notification of %s is %s: %+v", proc, r.State, r)
				}
				drops = append(drops, r)
			}
		}
		return len(drops) > 0
	})
	if len(drops) != 1 || !strings.Contains(drops[0].Reason, reason) {
		h.t.Fatalf("drop records of %s: %+v; want one with %q", proc, drops, reason)
	}
	if h.chat.count(proc) != 0 {
		h.t.Fatalf("%s reached the chat", proc)
	}
}

// noOtherRecord checks that nothing but the one answer row mentions proc.
func (h *harness) noOtherRecord(proc string) {
	h.t.Helper()
	if d := h.rowsWith(delivery.Dropped, proc); len(d) != 0 {
		h.t.Fatalf("extra drop records of %s: %+v", proc, d)
	}
}
