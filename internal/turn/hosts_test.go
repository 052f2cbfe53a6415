package turn

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/internal/agent"
)

// Two hosts on one database: host b's Start leaves host a's open turns alone, and Adopt takes
// them over, once, as a restart would, when a has stopped (its running foreground turn ends
// interrupted and the user is asked to resend; nothing is answered twice, however often Adopt
// is called, and a's own recording of later events stays a's).
func TestTakeOverFromStoppedHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{Instance: "a"})
		h.say(dm, "think hard")
		a.next(t) // host a is running the turn
		b := h.another(agent.NewBuiltin(agent.Config{}), Options{Instance: "b"})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := len(b.chat.texts()); n != 0 {
			t.Fatalf("host b acted on another host's turn: %q", b.chat.texts())
		}
		// Host a dies mid-turn (no clean stop: its rows stay open and its own).
		h.cancel()
		ctx := context.Background()
		var adopted int
		for range 3 {
			n, err := b.e.Adopt(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			adopted += n
		}
		if adopted != 1 {
			t.Fatalf("adopted %d rows, want 1", adopted)
		}
		b.inboxOutcome(h.key(dm), "think hard", stInterrupted, "the host restarted")
		b.chat.waitFor(t, "the restart notice", has("please send it again"))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := b.chat.count("please send it again"); n != 1 {
			t.Fatalf("notice sent %d times: %q", n, b.chat.texts())
		}
	})
}

// sentByEither is what the two hosts h and b sent into the chats, in h's then b's order: with
// leased lanes, a message one host enqueued may be sent by the other host's lane.
func sentByEither(h, b *harness) []string { return append(h.chat.texts(), b.chat.texts()...) }

// waitEither waits until one of the two hosts sent a message containing sub.
func waitEither(t *testing.T, h, b *harness, what, sub string) {
	t.Helper()
	until(t, what, func() bool { return h.chat.count(sub)+b.chat.count(sub) > 0 })
}

// stepper is an agent that streams its answer in steps the test hands it: each value received
// from steps is the text so far (Turn.OnText); when steps is closed, the last one is the answer.
type stepper struct{ steps chan string }

func (s *stepper) Turn(_ context.Context, t *agent.Turn) (*agent.Reply, error) {
	var text string
	for step := range s.steps {
		text = step
		if t.OnText != nil {
			t.OnText(step)
		}
	}
	return &agent.Reply{Text: text}, nil
}

// A host paused mid-stream past its lease, whose running turn another host adopted, posts
// nothing more when it resumes: no further draft edit and no final answer. The adopting host's
// interruption notice is the only message either host sends after the adoption.
func TestPausedHostStreamsNothingAfterAdoption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		edit := func(string) bool { return true }
		s := &stepper{steps: make(chan string)}
		h := newHarness(t, s, Options{Instance: "a", CanEdit: edit})
		h.say(dm, "tell me a story")
		s.steps <- "Once upon"
		h.chat.waitFor(t, "the first draft", has("Once upon"))
		// Host a is paused (its agent waits for the next step); host b adopts its rows.
		b := h.another(agent.NewBuiltin(agent.Config{}), Options{Instance: "b", CanEdit: edit})
		if n, err := b.e.Adopt(context.Background(), "a"); err != nil || n != 1 {
			t.Fatalf("adopted %d rows, %v; want 1", n, err)
		}
		waitEither(t, h, b, "the restart notice", "please send it again")
		// Host a resumes: its agent writes on, then ends its answer.
		s.steps <- "Once upon a time"
		time.Sleep(5 * time.Second)
		synctest.Wait()
		s.steps <- "Once upon a time, the end."
		close(s.steps)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		got := sentByEither(h, b)
		if len(got) != 2 || got[0] != "Once upon"+streamSuffix || !slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, "please send it again") }) {
			t.Fatalf("sent %q; want the first draft and then only the restart notice", got)
		}
		b.inboxOutcome(h.key(dm), "tell me a story", stInterrupted, "the host restarted")
	})
}

// A /new received by one host cancels the chat's queued message that another host adopted: the
// adopting host, which took the message off its queue before the /new, does not run it, and
// nothing is answered into the new conversation.
func TestNewCancelsAMessageAnotherHostAdopted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{Instance: "a"})
		h.say(dm, "first")
		a.next(t)
		h.say(dm, "second") // queued behind the busy turn on host a
		// Host a is paused past its lease; host b adopts its rows and takes "second" off its
		// queue, to run it next.
		b := h.another(agent.NewBuiltin(agent.Config{}), Options{Instance: "b"})
		popped, resume := make(chan struct{}), make(chan struct{})
		var once, resumed sync.Once
		release := func() { resumed.Do(func() { close(resume) }) }
		t.Cleanup(release) // before the engines' cleanups wait for the runner
		testHookPopped = func(it *item) {
			if it.texts()[0] == "second" {
				once.Do(func() { close(popped); <-resume })
			}
		}
		defer func() { testHookPopped = nil }()
		if n, err := b.e.Adopt(context.Background(), "a"); err != nil || n != 2 {
			t.Fatalf("adopted %d rows, %v; want 2", n, err)
		}
		<-popped
		// Host a resumes and receives the user's /new.
		h.say(dm, "/new")
		waitEither(t, h, b, "the /new confirmation", "New conversation")
		release()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		h.inboxOutcome(h.key(dm), "second", stDropped, "cancelled by /new")
		if got := sentByEither(h, b); len(got) != 2 {
			t.Fatalf("sent %q; want only the restart notice of the first message and the /new confirmation", got)
		}
		if tr := transcript(t, h.k, h.current(dm).SessionID); strings.Contains(tr, "assistant:") {
			t.Fatalf("the new conversation got an answer: %q", tr)
		}
	})
}

// A /new received by one host while another host runs the chat's adopted message: the running
// row is recorded interrupted by the /new, and the other host writes nothing for it. If that
// host had marked the row running but not yet stamped its turn, the turn does not run at all
// (its agent never starts, so no tool of it acts in the new conversation); if its agent is
// already answering, the answer is not sent.
func TestNewInterruptsWhatAnotherHostRuns(t *testing.T) {
	for _, c := range []struct {
		name    string
		stamped bool // the other host's turn is in its agent when the /new arrives
	}{{"before the stamp", false}, {"in the agent", true}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := newBlocking()
				h := newHarness(t, a, Options{Instance: "a"})
				h.say(dm, "first")
				a.next(t)
				h.say(dm, "second")
				bAgent := newBlocking()
				b := h.another(bAgent, Options{Instance: "b"})
				begun, resume := make(chan struct{}), make(chan struct{})
				var once, resumed sync.Once
				release := func() { resumed.Do(func() { close(resume) }) }
				t.Cleanup(release) // before the engines' cleanups wait for the runner
				testHookBegun = func(it *item) {
					if !c.stamped && it.texts()[0] == "second" {
						once.Do(func() { close(begun); <-resume })
					}
				}
				defer func() { testHookBegun = nil }()
				if n, err := b.e.Adopt(context.Background(), "a"); err != nil || n != 2 {
					t.Fatalf("adopted %d rows, %v; want 2", n, err)
				}
				if c.stamped {
					bAgent.next(t)
				} else {
					<-begun
				}
				h.say(dm, "/new")
				waitEither(t, h, b, "the /new confirmation", "New conversation")
				if c.stamped {
					bAgent.release <- "the answer to second"
				} else {
					release()
				}
				time.Sleep(5 * time.Second)
				synctest.Wait()
				h.inboxOutcome(h.key(dm), "second", stInterrupted, "interrupted by /new")
				if !c.stamped {
					select {
					case turn := <-bAgent.started:
						t.Fatalf("host b ran %q after the /new", turn.Text)
					default:
					}
				}
				if got := sentByEither(h, b); len(got) != 2 {
					t.Fatalf("sent %q; want only the restart notice of the first message and the /new confirmation", got)
				}
				if tr := transcript(t, h.k, h.current(dm).SessionID); strings.Contains(tr, "assistant:") {
					t.Fatalf("the new conversation got an answer: %q", tr)
				}
			})
		})
	}
}

// A host paused mid-turn past its lease, whose running turn another host adopted (and told the
// user it was interrupted), starts no process when it resumes and its model asks for one: the
// turn's tool calls are fenced by the rows' owner, as its drafts are. Otherwise the command the
// user was told did not finish runs anyway, and runs again when the user sends it again.
func TestPausedHostStartsNoProcessAfterAdoption(t *testing.T) {
	// In real time: a process that starts is a real one.
	resume, spawned := make(chan struct{}), make(chan error, 1)
	a := agent.Func(func(ctx context.Context, t *agent.Turn) (*agent.Reply, error) {
		<-resume
		_, err := t.Tools.Spawn(ctx, agent.SpawnRequest{Command: "sleep 30", Background: true, NotifyOnComplete: true})
		spawned <- err
		return &agent.Reply{Text: "started it"}, nil
	})
	h := newHarness(t, a, Options{Instance: "a"}, withShell("/bin/sh"))
	h.say(dm, "please run the job")
	until := time.Now().Add(20 * time.Second)
	for !h.inboxIs(h.key(dm), "please run the job", stRunning) {
		if time.Now().After(until) {
			t.Fatal("the turn did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := h.another(agent.NewBuiltin(agent.Config{}), Options{Instance: "b"})
	if n, err := b.e.Adopt(context.Background(), "a"); err != nil || n != 1 {
		t.Fatalf("adopted %d rows, %v; want 1", n, err)
	}
	b.chat.waitFor(t, "the restart notice", has("please send it again"))
	close(resume) // host a resumes: its model asks to start the job
	if err := <-spawned; !errors.Is(err, ErrTurnGone) {
		t.Errorf("the adopted turn's spawn: %v; want ErrTurnGone", err)
	}
	var n int
	if err := h.db.QueryRow(`SELECT COUNT(*) FROM processes`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the adopted turn started %d processes (%v)", n, err)
	}
}

// inboxIs reports whether the newest inbox row of key with text is in state.
func (h *harness) inboxIs(key, text, state string) bool {
	h.t.Helper()
	var st string
	err := h.e.db.QueryRow(`SELECT state FROM turn_inbox WHERE session_key = $1 AND text = $2 ORDER BY rowid DESC LIMIT 1`,
		key, text).Scan(&st)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		h.t.Fatal(err)
	}
	return st == state
}

// A host paused while it applied an event (after it checked the row was still its own, inside
// the chat's boundary), whose row another host adopted meanwhile, leaves the event to that host
// when it resumes (which then applies it, once it has the boundary): the command is answered
// once, not by both.
func TestPausedHostLeavesAnAdoptedEventAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{Instance: "a"})
		applying, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		testHookApplying = func(r *inboxRow) {
			if r.text == "/status" {
				once.Do(func() { close(applying); <-resume })
			}
		}
		defer func() { testHookApplying = nil }()
		done := make(chan struct{})
		go func() { h.say(dm, "/status"); close(done) }()
		<-applying // host a is paused inside the apply
		b := h.another(agent.NewBuiltin(agent.Config{}), Options{Instance: "b"})
		if n, err := b.e.Adopt(context.Background(), "a"); err != nil || n != 1 {
			t.Fatalf("adopted %d rows, %v; want 1", n, err)
		}
		// Host b waits for the chat's boundary, which host a holds; host a resumes.
		close(resume)
		<-done
		waitEither(t, h, b, "the answer", "Session key:")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := h.chat.count("Session key:") + b.chat.count("Session key:"); n != 1 {
			t.Fatalf("/status answered %d times: %q", n, sentByEither(h, b))
		}
	})
}
