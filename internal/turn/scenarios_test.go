package turn

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
)

// spawn starts a background process from src's current session, as a turn's tool would.
func (h *harness) spawn(src abi.Source, cmd string, notify bool, mutate ...func(*session.Stamp)) process.SpawnResult {
	h.t.Helper()
	res, err := h.trySpawn(src, cmd, notify, mutate...)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// trySpawn is spawn for any goroutine: it returns errors instead of failing the test.
func (h *harness) trySpawn(src abi.Source, cmd string, notify bool, mutate ...func(*session.Stamp)) (process.SpawnResult, error) {
	key, err := h.k.Key(src)
	if err != nil {
		return process.SpawnResult{}, err
	}
	var res process.SpawnResult
	err = h.k.WithBoundary(context.Background(), key, func(b *session.Boundary) error {
		if _, err := b.Resolve(src, session.ResolveOptions{}); err != nil {
			return err
		}
		st, err := b.Stamp(src)
		if err != nil {
			return err
		}
		for _, m := range mutate {
			m(&st)
		}
		res, err = h.procs.Spawn(b.Context(), process.SpawnRequest{Command: cmd, Stamp: st, NotifyOnComplete: notify})
		return err
	})
	return res, err
}

// eventDone waits until the process's first event is final (done or suppressed) and returns it.
func (h *harness) eventDone(procID string) process.Record {
	h.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		recs, err := h.procs.Queue().Events(context.Background(), procID)
		if err != nil {
			h.t.Fatal(err)
		}
		if len(recs) > 0 && (recs[0].QueueState == "done" || recs[0].QueueState == "suppressed") {
			return recs[0]
		}
	}
	h.t.Fatalf("the event of %s was never handled", procID)
	return process.Record{}
}

// finalRow waits for a ledger row in state whose text contains sub.
func (h *harness) finalRow(state delivery.State, sub string) delivery.Row {
	h.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		for _, r := range h.rows {
			if r.State == state && strings.Contains(r.Target.Text, sub) {
				h.mu.Unlock()
				return r
			}
		}
		h.mu.Unlock()
	}
	h.t.Fatalf("no %s row containing %q", state, sub)
	return delivery.Row{}
}

// Scenario 1 (★): a process spawned in S1, then /new, then the process exits: the completion is
// dropped and recorded, nothing reaches the chat, and the output stays readable.
func TestScenario1StaleAfterNew(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	h.say(dm, "hi")
	p := h.spawn(dm, "sleep 0.3; echo secret-old-output", true)
	h.say(dm, "/new")
	row := h.droppedRow(p.ID)
	if !strings.Contains(row.Reason, session.ReasonUserBoundary) || h.chat.count("old-output") != 0 || h.chat.count("finished") != 0 {
		t.Fatalf("row %+v, sent %q", row, h.chat.texts())
	}
	log, err := h.procs.Log(context.Background(), p.ID, 0, 1000)
	if err != nil || !strings.Contains(string(log.Data), "secret-old-output") {
		t.Fatalf("output not readable: %q %v", log.Data, err)
	}
}

// Scenario 3 (★) and the seed's "repeat with compression": the completion follows the
// conversation into its compression continuation.
func TestScenario3CompressionContinuation(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	h.say(dm, "hi")
	p := h.spawn(dm, "sleep 0.3; echo compressed-ok", true)
	h.say(dm, "/compress")
	h.chat.waitFor(t, "the compress confirmation", has("Compressed"))
	row := h.finalRow(delivery.Delivered, "compressed-ok")
	cur := h.current(dm)
	if row.SessionID != cur.SessionID {
		t.Fatalf("delivered into %s, continuation is %s", row.SessionID, cur.SessionID)
	}
	if tr := transcript(t, h.k, cur.SessionID); !strings.Contains(tr, "compressed-ok") {
		t.Fatalf("continuation transcript %q", tr)
	}
	_ = p
}

// Scenario 2 (★): the spawning session ended for a non-user reason (idle): the notice goes to the
// chat's current session.
func TestScenario2NonUserEndDeliversToCurrent(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	h.say(dm, "hi")
	old := h.current(dm)
	h.spawn(dm, "sleep 0.3; echo idle-ok", true)
	if err := h.k.EndSession(context.Background(), old.SessionID, session.EndIdle); err != nil {
		t.Fatal(err)
	}
	h.say(dm, "back again") // a new session replaces the idle one
	h.finalRow(delivery.Delivered, "idle-ok")
	cur := h.current(dm)
	if cur.SessionID == old.SessionID || !strings.Contains(transcript(t, h.k, cur.SessionID), "idle-ok") {
		t.Fatalf("delivered to the wrong session; current %s old %s", cur.SessionID, old.SessionID)
	}
}

// Scenario 6 (★): an unstamped event (no spawning session, as recovered from an old checkpoint)
// is delivered by route.
func TestScenario6Unstamped(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	h.say(dm, "hi")
	h.spawn(dm, "echo legacy-ok", true, func(s *session.Stamp) { s.SessionID, s.Generation = "", 0 })
	h.chat.waitFor(t, "the notification", has("legacy-ok"))
}

// Scenario 7 (★): a process spawned from topic 42 notifies topic 42, though the user now talks in
// topic 7.
func TestScenario7TopicRoute(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	topic := func(id string) abi.Source {
		return abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatForum, ChatID: "-100", ThreadID: id, UserID: "u1"}
	}
	h.say(topic("42"), "hi")
	h.spawn(topic("42"), "sleep 0.3; echo topic-ok", true)
	h.say(topic("7"), "now over here")
	m := h.chat.waitFor(t, "the notification", has("topic-ok"))
	if m.ThreadID != "42" || m.ChatID != "-100" {
		t.Fatalf("notification went to %s/%s", m.ChatID, m.ThreadID)
	}
}

// Scenario 8 (★): the stamp's key and the route it carries disagree: dropped.
func TestScenario8KeyMismatch(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	h.say(dm, "hi")
	p := h.spawn(dm, "echo bleed", true, func(s *session.Stamp) {
		s.Route.ChatType, s.Route.ChatID = abi.ChatGroup, "-999" // a group route under a DM key
	})
	rec := h.eventDone(p.ID)
	if !strings.Contains(rec.Outcome, session.ReasonKeyMismatch) || h.chat.count("bleed") != 0 {
		t.Fatalf("outcome %q, sent %q", rec.Outcome, h.chat.texts())
	}
}

// Scenario 15: text mode, concise: one "✅ Done." for exit 0 (no command, no id, no output);
// "❌ That job hit a problem (exit 3)" with the tail for a failure.
func TestScenario15ConciseText(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{Notifications: ModeConcise})
	h.say(dm, "hi")
	ok := h.spawn(dm, "echo quiet-output", false)
	h.chat.waitFor(t, "done", has("✅ Done."))
	bad := h.spawn(dm, "echo loud-failure; exit 3", false)
	m := h.chat.waitFor(t, "failure", has("❌"))
	if !strings.Contains(m.Text, "exit 3") || !strings.Contains(m.Text, "loud-failure") {
		t.Fatalf("failure text %q", m.Text)
	}
	for _, s := range h.chat.texts() {
		if strings.Contains(s, ok.ID) || strings.Contains(s, bad.ID) || strings.Contains(s, "quiet-output") || strings.Contains(s, "echo ") {
			t.Fatalf("concise text leaked details: %q", s)
		}
	}
}

// Scenario 14: the agent consumed the result with wait: no notification at all.
func TestScenario14ConsumedNoNotification(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	h.say(dm, "hi")
	// The process outlives the spawn's return by far enough for Wait to be waiting when it ends
	// (on PostgreSQL the spawn's checkpoint round trips took long enough for a bare echo to end
	// first, and the completion was claimed for a notification before Wait consumed it).
	p := h.spawn(dm, "sleep 0.3; echo consumed-output", true)
	if _, err := h.procs.Wait(context.Background(), p.ID, 10e9); err != nil {
		t.Fatal(err)
	}
	if rec := h.eventDone(p.ID); rec.QueueState != "suppressed" {
		t.Fatalf("event %+v", rec)
	}
	h.say(dm, "ps") // a turn after: its answer proves the chat is not blocked
	h.chat.waitFor(t, "the ps answer", has(p.ID))
	if h.chat.count("finished") != 0 || h.chat.count("Last lines") != 0 {
		t.Fatalf("notified after consumption: %q", h.chat.texts())
	}
}

// Scenario 14, the other order: the notice was queued before the agent read the result. The
// text notice waits in the ledger (the test holds the chat's boundary, so its lane cannot send);
// the agent reads the result (Wait); the notice is then dropped at its send with the reason, and
// the chat never gets it. The question is answered by the ledger row and the withdrawal the
// registry recorded with the read, checked in the claim right before the send.
func TestScenario14ReadAfterTheNoticeWasQueued(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{Notifications: ModeAll})
	h.say(dm, "hi")
	h.chat.waitFor(t, "the answer to hi", func(abi.OutboundMessage) bool { return true })
	key := h.key(dm)
	var st session.Stamp
	if err := h.k.WithBoundary(context.Background(), key, func(b *session.Boundary) (err error) { st, err = b.Stamp(dm); return err }); err != nil {
		t.Fatal(err)
	}
	hold, release := make(chan struct{}), make(chan struct{})
	go h.k.WithBoundary(context.Background(), key, func(*session.Boundary) error { close(hold); <-release; return nil })
	<-hold
	p, err := h.procs.Spawn(context.Background(), process.SpawnRequest{Command: "echo read-later-output", Stamp: st})
	if err != nil {
		t.Fatal(err)
	}
	if rec := h.eventDone(p.ID); rec.QueueState != "done" || rec.Outcome != "queued" {
		t.Fatalf("event %+v", rec)
	}
	if _, err := h.procs.Wait(context.Background(), p.ID, 10e9); err != nil {
		t.Fatal(err)
	}
	close(release)
	r := h.droppedRow("read-later-output")
	if r.Reason != "suppressed: the agent already read the result of "+p.ID || r.Origin != p.ID {
		t.Fatalf("the notice %+v", r)
	}
	h.say(dm, "ps") // a turn after: its answer proves the lane went on
	h.chat.waitFor(t, "the ps answer", has(p.ID))
	if n := h.chat.count("Background job"); n != 0 {
		t.Fatalf("the notice reached the chat after the agent read the result: %q", h.chat.texts())
	}
}

// Scenario 19: two completions of one conversation arriving together become one turn.
func TestScenario19Batching(t *testing.T) {
	a := newBlocking()
	h := newHarness(t, a, Options{})
	h.say(dm, "start two jobs")
	a.next(t) // the foreground turn holds the chat while both complete
	h.spawn(dm, "echo job-one", true)
	h.spawn(dm, "echo job-two", true)
	for i := 0; i < 400; i++ { // both notifications queued behind the foreground turn
		h.e.queues.mu.Lock()
		n := 0
		if kq := h.e.queues.keys[h.key(dm)]; kq != nil && len(kq.items) == 1 {
			n = len(kq.items[0].entries)
		}
		h.e.queues.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.release <- "foreground answer"
	synth := a.next(t)
	if !synth.Synthetic || !strings.Contains(synth.Text, "job-one") || !strings.Contains(synth.Text, "job-two") {
		t.Fatalf("notification turn %+v", synth)
	}
	a.release <- "both done"
	h.chat.waitFor(t, "the consolidated answer", has("both done"))
}

// A notification turn in progress: /new cancels it and its answer is never delivered; in the
// other order (/new first), the notification is classified stale and recorded.
func TestNewDuringSyntheticTurn(t *testing.T) {
	t.Run("new-during-turn", func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "hi")
		a.next(t)
		a.release <- "hello"
		h.spawn(dm, "echo synth-job", true)
		synth := a.next(t)
		if !synth.Synthetic {
			t.Fatalf("expected the notification turn, got %+v", synth)
		}
		h.say(dm, "/new")
		if got := <-a.cancelled; !strings.Contains(got, "synth-job") {
			t.Fatalf("cancelled %q", got)
		}
		h.chat.waitFor(t, "the /new confirmation", has("New conversation"))
		h.say(dm, "fresh")
		if got := a.next(t); got.Text != "fresh" || got.Synthetic {
			t.Fatalf("next turn %+v", got)
		}
		a.release <- "fresh answer"
		h.chat.waitFor(t, "the fresh answer", has("fresh answer"))
	})
	t.Run("new-before-turn", func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "hi")
		a.next(t) // the foreground turn holds the chat
		p := h.spawn(dm, "echo queued-synth", true)
		h.eventDone(p.ID)
		h.say(dm, "/new") // cancels the foreground turn and drops the queued notification
		if got := <-a.cancelled; got != "hi" {
			t.Fatalf("cancelled %q", got)
		}
		h.chat.waitFor(t, "the /new confirmation", has("New conversation"))
		h.say(dm, "after")
		if got := a.next(t); got.Synthetic {
			t.Fatal("a notification of the left conversation ran")
		}
	})
}

// Foreground input that arrives during a notification turn is queued, not steered into it, and
// answered once afterwards; and the other order.
func TestForegroundDuringSyntheticTurn(t *testing.T) {
	t.Run("message-during-notification", func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "hi")
		a.next(t)
		a.release <- "hello"
		h.spawn(dm, "echo steer-job", true)
		synth := a.next(t)
		h.say(dm, "are you there?")
		a.release <- "job summary"
		if strings.Contains(synth.Text, "are you there") {
			t.Fatal("foreground input steered the notification turn")
		}
		fg := a.next(t)
		if fg.Synthetic || fg.Text != "are you there?" {
			t.Fatalf("foreground turn %+v", fg)
		}
		a.release <- "yes"
		h.chat.waitFor(t, "the foreground answer", has("yes"))
		if h.chat.count("job summary") != 1 || h.chat.count("yes") != 1 {
			t.Fatalf("sent %q", h.chat.texts())
		}
	})
	t.Run("notification-during-message", func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "long question")
		a.next(t)
		p2 := h.spawn(dm, "echo waits-job", true)
		h.eventDone(p2.ID)
		a.release <- "long answer"
		synth := a.next(t) // the notification waited behind the foreground turn
		if !synth.Synthetic {
			t.Fatalf("turn %+v", synth)
		}
		a.release <- "job summary"
		h.chat.waitFor(t, "the summary", has("job summary"))
		sent := h.chat.texts()
		if sent[0] != "long answer" {
			t.Fatalf("order %q", sent)
		}
	})
}

// /stop during a notification turn cancels it; the transcript is kept and the chat moves on.
func TestStopDuringSyntheticTurn(t *testing.T) {
	a := newBlocking()
	h := newHarness(t, a, Options{})
	r := h.say(dm, "hi")
	a.next(t)
	a.release <- "hello"
	h.spawn(dm, "echo stop-job", true)
	a.next(t)
	h.say(dm, "/stop")
	if got := <-a.cancelled; !strings.Contains(got, "stop-job") {
		t.Fatalf("cancelled %q", got)
	}
	h.chat.waitFor(t, "stop confirmation", has("Stopped"))
	if tr := transcript(t, h.k, r.Session.SessionID); !strings.Contains(tr, "assistant:hello") {
		t.Fatalf("transcript lost: %q", tr)
	}
}

// The other order: /stop while a notification waits behind a foreground turn. The foreground
// turn is cancelled; the queued notification survives the /stop and is answered after it.
func TestStopBeforeSyntheticTurn(t *testing.T) {
	a := newBlocking()
	h := newHarness(t, a, Options{})
	h.say(dm, "busy work")
	a.next(t)
	p := h.spawn(dm, "echo kept-job", true)
	h.eventDone(p.ID)
	h.say(dm, "/stop")
	if got := <-a.cancelled; got != "busy work" {
		t.Fatalf("cancelled %q", got)
	}
	synth := a.next(t)
	if !synth.Synthetic || !strings.Contains(synth.Text, "kept-job") {
		t.Fatalf("turn after /stop %+v", synth)
	}
	a.release <- "kept job summary"
	h.chat.waitFor(t, "the summary", has("kept job summary"))
}
