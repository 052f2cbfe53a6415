package turn

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/session"
)

// TestDispatchDoesNotWaitForABusyBoundary: while something holds a chat's boundary (a send to
// a platform that does not answer), Dispatch records the chat's events and returns within
// IntakeWait; they are applied in arrival order once the boundary is free.
func TestDispatchDoesNotWaitForABusyBoundary(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	key := h.key(dm)
	if r := h.say(dm, "hello"); r.Session.SessionID == "" {
		t.Fatalf("an uncontended dispatch is applied at once: %+v", r)
	}
	before := h.current(dm)
	held, release := make(chan struct{}), make(chan struct{})
	go h.k.WithBoundary(context.Background(), key, func(*session.Boundary) error {
		close(held)
		<-release
		return nil
	})
	<-held
	start := time.Now()
	for _, text := range []string{"first", "/new", "third"} {
		if r := h.say(dm, text); r.Duplicate || r.Session.SessionID != "" {
			t.Fatalf("%s: %+v (applied while the boundary was held)", text, r)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("three dispatches took %v with the boundary held", took)
	}
	var n int
	h.e.db.QueryRow(`SELECT count(*) FROM turn_inbox WHERE state = 'received'`).Scan(&n)
	if n != 3 {
		t.Fatalf("%d events recorded as received, want 3", n)
	}
	close(release)
	// Applied in order: "first" in the old session, then /new, then "third" in the new one.
	h.chat.waitFor(t, "the /new confirmation", func(m abi.OutboundMessage) bool { return m.Text == "✨ New conversation started." })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h.e.db.QueryRow(`SELECT count(*) FROM turn_inbox WHERE state = 'received'`).Scan(&n)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("events never applied")
		}
	}
	after := h.current(dm)
	if after.SessionID == before.SessionID {
		t.Fatal("/new was not applied")
	}
	users := func(id string) (out []string) {
		msgs, _ := h.k.Transcript(context.Background(), id, 20)
		for _, m := range msgs {
			if m.Role == "user" {
				out = append(out, m.Text)
			}
		}
		return out
	}
	if old, cur := strings.Join(users(before.SessionID), ","), strings.Join(users(after.SessionID), ","); old != "hello,first,/new" || cur != "third" {
		t.Fatalf("order: old session %q, new session %q", old, cur)
	}
}

// TestEventRecordedBehindAnErrorIsApplied: an insert that committed but reported an error (a
// context cancelled while the commit ran) is found once the store answers and applied, once: the
// platform's retry of the event is then a duplicate that must not leave it waiting for the next
// start (found by the promise checker: a Slack message recorded behind "context canceled"
// during a store outage, its retry deduplicated, never answered).
func TestEventRecordedBehindAnErrorIsApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
		h.e.insertFault = context.Canceled
		ev := abi.InboundEvent{ID: "ambiguous1", Source: dm, Text: "hello after an outage"}
		ev.Source.MessageID = ev.ID
		if _, err := h.e.Dispatch(context.Background(), "echo", "main", ev); err == nil {
			t.Fatal("the insert's error was not reported")
		}
		h.e.insertFault = nil
		// The platform retries the event it was told was not recorded: a duplicate now.
		if again, err := h.e.Dispatch(context.Background(), "echo", "main", ev); err != nil || !again.Duplicate {
			t.Fatalf("the retry: %+v %v", again, err)
		}
		h.chat.waitFor(t, "the answer", has("help"))
		key := h.key(dm)
		h.inboxOutcome(key, ev.Text, stDone, "")
		r := h.current(dm)
		tr := transcript(t, h.k, r.SessionID)
		if strings.Count(tr, "user:hello after an outage") != 1 {
			t.Fatalf("the event was applied other than once: %q", tr)
		}
	})
}

// TestApplyingTwiceIsOnce: a recorded event handed to the intake twice (the settling of an
// unknown insert beside its own first attempt) is applied once; the second finds it applied.
func TestApplyingTwiceIsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
		src := dm
		src.MessageID = "twice1"
		key := h.key(src)
		row := &inboxRow{id: newID("in_"), plugin: "echo", profile: "main", eventID: "twice1", key: key, src: src,
			text: "hello twice", kind: kindMessage, eventKind: abi.EventMessage}
		if fresh, err := h.e.insert(context.Background(), h.db, row, stReceived); err != nil || !fresh {
			t.Fatalf("insert: %v %v", fresh, err)
		}
		h.e.applyLater([]*inboxRow{row, row})
		h.chat.waitFor(t, "the answer", has("help"))
		h.inboxOutcome(key, row.text, stDone, "")
		h.e.applyLater([]*inboxRow{row})
		until(t, "the intake to drain", func() bool {
			h.e.intake.mu.Lock()
			defer h.e.intake.mu.Unlock()
			return len(h.e.intake.m) == 0
		})
		tr := transcript(t, h.k, h.current(src).SessionID)
		if strings.Count(tr, "user:hello twice") != 1 || h.chat.count("help") != 1 {
			t.Fatalf("applied other than once: transcript %q, sent %q", tr, h.chat.texts())
		}
	})
}
