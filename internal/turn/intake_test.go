package turn

import (
	"context"
	"strings"
	"testing"
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
