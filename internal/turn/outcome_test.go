package turn

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
)

// failing is an agent whose foreground turns fail with err.
type failing struct{ err error }

func (f failing) Turn(ctx context.Context, t *agent.Turn) (*agent.Reply, error) { return nil, f.err }

// TestInboxOutcomes: the inbox says what happened to each turn: done with the answer it queued,
// failed with the reason (the user is told), interrupted and by what. A finished turn is never
// recorded as interrupted.
func TestInboxOutcomes(t *testing.T) {
	t.Run("done", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
			h.say(dm, "hello there")
			h.inboxOutcome(h.key(dm), "hello there", stDone, "answered dlv_")
		})
	})
	t.Run("failed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, failing{errors.New("model unreachable")}, Options{})
			h.say(dm, "hello there")
			h.inboxOutcome(h.key(dm), "hello there", stFailed, "agent: model unreachable")
			h.chat.waitFor(t, "the user told", has("⚠️"))
		})
	})
	for _, cmd := range []string{"/stop", "/new", "/reset"} {
		t.Run("interrupted by "+cmd, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := newBlocking()
				h := newHarness(t, a, Options{})
				h.say(dm, "think hard")
				a.next(t)
				h.say(dm, cmd)
				<-a.cancelled
				h.inboxOutcome(h.key(dm), "think hard", stInterrupted, "interrupted by "+cmd)
				h.inboxOutcome(h.key(dm), cmd, stDone, "command "+cmd)
			})
		})
	}
}

// TestNewInTheGapBeforeANotificationTurn: /new lands after the notification turn was taken off
// the queue and before it marked its row running (the window in which the old engine recorded
// nothing). The /new records the drop; the turn does not run; exactly one record.
func TestNewInTheGapBeforeANotificationTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
		h.say(dm, "hi")
		h.inboxOutcome(h.key(dm), "hi", stDone, "answered")
		popped, resume := make(chan *item), make(chan struct{})
		testHookPopped = func(it *item) {
			if it.kind == kindNotification {
				popped <- it
				<-resume
			}
		}
		defer func() { testHookPopped = nil }()
		p := h.spawn(dm, "echo in-the-gap", true)
		<-popped
		h.say(dm, "/new")
		close(resume)
		h.droppedOnce(p.ID, "interrupted by /new")
		if h.chat.count("in-the-gap") != 0 {
			t.Fatalf("the notification ran: %q", h.chat.texts())
		}
	})
}

// TestRestartOutcomes: the host dies with a foreground turn and a notification turn open. After
// the restart the foreground turn is reported interrupted (and the user asked to resend, in the
// same transaction), and the notification turn, which has no side effects and whose answer was
// not recorded, runs again and is delivered once.
func TestRestartOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "hi")
		a.next(t)
		a.release <- "hello"
		p := h.spawn(dm, "echo survives-restart", true)
		synth := a.next(t) // the notification turn is running
		if !synth.Synthetic {
			t.Fatalf("turn %+v", synth)
		}
		h.say(dm, "long question") // queued behind it
		h2 := h.crashAndRestart(agent.NewBuiltin(agent.Config{}))
		h2.inboxOutcome(h.key(dm), "long question", stDone, "answered")
		h2.chat.waitFor(t, "the notification after the restart", has("survives-restart"))
		if n := h2.chat.count("survives-restart"); n != 1 {
			t.Fatalf("delivered %d times: %q", n, h2.chat.texts())
		}
		h2.noOtherRecord(p.ID)
	})
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "think hard")
		a.next(t)
		h2 := h.crashAndRestart(agent.NewBuiltin(agent.Config{}))
		h2.inboxOutcome(h.key(dm), "think hard", stInterrupted, "the host restarted")
		h2.chat.waitFor(t, "the restart notice", has("please send it again"))
	})
	// A /new recorded while the chat's boundary was busy, and the host died before applying it:
	// the restart applies it. Its row leaves 'received' as done, the conversation is new, and the
	// user is told once.
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "think hard")
		a.next(t)
		before := h.current(dm)
		held, release := make(chan struct{}), make(chan struct{})
		go h.k.WithBoundary(context.Background(), h.key(dm), func(*session.Boundary) error {
			close(held)
			<-release
			return nil
		})
		<-held
		if r := h.say(dm, "/new"); r.Session.SessionID != "" {
			t.Fatalf("/new applied while the boundary was held: %+v", r)
		}
		h2 := h.crashAndRestart(agent.NewBuiltin(agent.Config{}))
		close(release)
		h2.inboxOutcome(h.key(dm), "/new", stDone, "command /new")
		h2.inboxOutcome(h.key(dm), "think hard", stInterrupted, "the host restarted")
		h2.chat.waitFor(t, "the /new confirmation", has("New conversation started"))
		if after := h2.current(dm); after.SessionID == before.SessionID {
			t.Fatal("the recorded /new did not act after the restart")
		}
		synctest.Wait()
		if n := h2.chat.count("New conversation started"); n != 1 {
			t.Fatalf("confirmed %d times", n)
		}
	})
}

// TestInterruptedTurnIsAnsweredForTheModel: a message turn interrupted by a restart after it
// started a process reads, in the next turns' history, as answered by a note naming the
// process, right after the message: neither a turn queued before the restart nor a later one
// takes it as still open (their model would start the command again; found by the promise
// checker: a watch started twice, each match posted twice).
func TestInterruptedTurnIsAnsweredForTheModel(t *testing.T) {
	// In real time: the process is a real one.
	a := newBlocking()
	h := newHarness(t, a, Options{}, withShell("/bin/sh"))
	h.say(dm, "please run the job")
	a.next(t)
	p := h.spawn(dm, "sleep 3", false) // what the turn's tool call started
	h.say(dm, "queued behind it")
	a2 := newBlocking()
	h2 := h.crashAndRestart(a2)
	if st, out := h.settled(h.key(dm), "please run the job"); st != stInterrupted || !strings.Contains(out, "the host restarted") {
		t.Fatalf("the interrupted turn: %s %q", st, out)
	}
	for _, want := range []string{"queued behind it", "and then?"} {
		if want == "and then?" {
			h2.say(dm, want)
		}
		turn := a2.next(t)
		got := texts(turn.History)
		if !strings.HasPrefix(got, "user:please run the job\nassistant:"+interruptedNote) || !strings.Contains(got, p.ID+": sleep 3") {
			t.Fatalf("turn %q: the interrupted message is not answered by a note naming %s:\n%s", want, p.ID, got)
		}
		a2.release <- "answer to " + want
	}
}

// crashAndRestart stops h's engine the way a crash leaves it (open turns stay open: the engine
// writes nothing when its context ends) and starts a new ledger, registry and engine on the same
// database, with agent a.
func (h *harness) crashAndRestart(a agent.Agent) *harness {
	h.t.Helper()
	h.cancel()
	h.e.Wait()
	h.ledger.Stop()
	h.procs.Close()
	return h.another(a, Options{})
}

// another starts a second engine (with its ledger and registry) on h's database, as another host
// on a shared database, or h's own restart after a crash.
func (h *harness) another(a agent.Agent, opt Options) *harness {
	h.t.Helper()
	db := h.e.db
	ctx, cancel := context.WithCancel(context.Background())
	h2 := &harness{t: h.t, k: h.k, chat: newChat(), cancel: cancel, ctx: ctx, rows: map[string]delivery.Row{}}
	quiet := slog.New(slog.DiscardHandler)
	var err error
	if h2.procs, err = process.New(ctx, db, process.Options{DataDir: h.dir, Logger: quiet, PollInterval: 20 * time.Millisecond}); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h2.procs.Recover(ctx); err != nil {
		h.t.Fatal(err)
	}
	if h2.ledger, err = delivery.Open(ctx, db, h.k, h2.chat, delivery.Options{Logger: quiet, Backoff: 20 * time.Millisecond,
		Observer: func(r delivery.Row) { h2.mu.Lock(); h2.rows[r.ID] = r; h2.mu.Unlock() }}); err != nil {
		h.t.Fatal(err)
	}
	opt.Logger, opt.RetryBase = quiet, 20*time.Millisecond
	if h2.e, err = New(ctx, db, h.k, h2.ledger, a, h2.procs, staticRouter{}, opt); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h2.ledger.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	if err := h2.e.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		cancel()
		h2.e.Wait()
		h2.ledger.Stop()
		h2.procs.Close()
	})
	return h2
}
