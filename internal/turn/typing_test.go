package turn

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
)

// typist records the chat actions the engine asks for.
type typist struct {
	calls chan abi.OutboundMessage
}

func (t *typist) Typing(ctx context.Context, plugin, profile string, target abi.OutboundMessage) {
	if ctx.Done() != nil {
		panic("a chat action must not be cancellable: a plugin call cut short is a crash")
	}
	t.calls <- target
}

func TestTypingWhileATurnRuns(t *testing.T) {
	a := newBlocking()
	ty := &typist{calls: make(chan abi.OutboundMessage, 64)}
	// Short periods so that the test sees the repetition; the rate limit uses the same period.
	h := newHarness(t, a, Options{Typing: ty, TypingAfter: time.Millisecond, TypingEvery: 5 * time.Millisecond})
	topic := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatForum, ChatID: "-1001", ThreadID: "7", UserID: "u1"}
	h.say(topic, "think")
	a.next(t)
	for i := range 2 { // repeated while the turn runs
		select {
		case m := <-ty.calls:
			if m.ChatID != "-1001" || m.ThreadID != "7" || m.Text != "" {
				t.Fatalf("typing into %+v", m)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("typing %d never sent", i+1)
		}
	}
	a.release <- "done thinking"
	h.chat.waitFor(t, "the answer", has("done thinking"))
	h.chat.mu.Lock()
	defer h.chat.mu.Unlock()
	for _, m := range h.chat.sent {
		if m.Action != "" {
			t.Fatalf("a chat action went through the ledger: %+v", m)
		}
	}
}

// A turn that answers before TypingAfter shows no typing at all.
func TestQuickTurnSendsNoTyping(t *testing.T) {
	ty := &typist{calls: make(chan abi.OutboundMessage, 64)}
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{Typing: ty, TypingAfter: time.Hour})
	h.say(dm, "hello")
	h.chat.waitFor(t, "an answer", has("help"))
	if n := len(ty.calls); n != 0 {
		t.Fatalf("%d chat actions for a quick answer", n)
	}
}

// At most one chat action per chat per TypingEvery, however many turns run there.
func TestTypingIsRateLimitedPerChat(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := &Engine{opt: Options{Now: clock, TypingEvery: 4 * time.Second}, typingRate: chatRates{last: map[string]time.Time{}}}
	if !e.typingDue("a") || e.typingDue("a") || !e.typingDue("b") {
		t.Fatal("first per chat, then limited")
	}
	mu.Lock()
	now = now.Add(3 * time.Second)
	mu.Unlock()
	if e.typingDue("a") {
		t.Fatal("due again before the period")
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if !e.typingDue("a") {
		t.Fatal("not due after the period")
	}
	// The table stays bounded: old entries go once it is large.
	for i := range 2000 {
		e.typingDue(fmt.Sprint("chat", i))
		if i == 999 {
			mu.Lock()
			now = now.Add(time.Minute)
			mu.Unlock()
		}
	}
	if n := len(e.typingRate.last); n > 1100 {
		t.Fatalf("%d entries kept", n)
	}
}

// A migration service message (migrate_from_chat_id): the supergroup continues the group's
// conversation, the note is appended once, and answers owed to the group go to the supergroup.
func TestMigrationEventCarriesTheConversation(t *testing.T) {
	a := newBlocking()
	h := newHarness(t, a, Options{})
	group := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatGroup, ChatID: "-4001", UserID: "u1"}
	super := group
	super.ChatID = "-1004001"
	h.say(group, "remember this")
	a.next(t)
	// A dispatch's reply names the session only when the event was applied within its wait (on
	// a loaded machine it may be applied after): the routes say where it went.
	first := h.current(group).SessionID

	note := func(id string) abi.DispatchReply {
		r, err := h.e.Dispatch(context.Background(), "echo", "main", abi.InboundEvent{ID: id, Kind: abi.EventObserve,
			Source: super, Text: "(this group is now a supergroup)", MigrateFromChatID: group.ChatID})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r1, r2 := note("mig1"), note("mig2")
	for _, r := range []abi.DispatchReply{r1, r2} {
		if r.Session.SessionID != "" && r.Session.SessionID != first {
			t.Fatalf("a service message went to %s, want %s", r.Session.SessionID, first)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(transcript(t, h.k, first), "now a supergroup"); {
		if time.Now().After(deadline) {
			t.Fatal("the migration note was never applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The running turn's answer was addressed to the group: it reaches the supergroup.
	a.release <- "answer for the group"
	if m := h.chat.waitFor(t, "the answer", has("answer for the group")); m.ChatID != super.ChatID {
		t.Fatalf("answer sent to %s", m.ChatID)
	}
	h.say(super, "still there?")
	a.next(t)
	if got := h.current(super).SessionID; got != first {
		t.Fatalf("the supergroup is in session %s, want the group's %s", got, first)
	}
	a.release <- "yes"
	h.chat.waitFor(t, "yes", has("yes"))
	if tr := transcript(t, h.k, first); strings.Count(tr, "now a supergroup") != 1 ||
		!strings.Contains(tr, "remember this") || !strings.Contains(tr, "still there?") {
		t.Fatalf("transcript %q", tr)
	}
}
