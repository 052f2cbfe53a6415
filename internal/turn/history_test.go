package turn

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/hermes-host/hermes-host/internal/agent"
)

// A message applied after a turn was taken off the queue (it will be the next turn's) is not in
// that turn's history: the model would answer it there, and again in its own turn (found by the
// promise checker on a paused host: a turn that started late answered the three messages queued
// behind it, which their own turn then answered again, each shown twice).
func TestLaterMessagesAreNotInAnEarlierTurnsHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		var once sync.Once
		testHookBegun = func(it *item) {
			if it.texts()[0] == "first" {
				once.Do(func() { h.say(dm, "second") }) // applied before the turn reads its history
			}
		}
		defer func() { testHookBegun = nil }()
		h.say(dm, "first")
		turn := a.next(t)
		if got := texts(turn.History); strings.Contains(got, "second") || turn.Text != "first" {
			t.Fatalf("the first turn (%q) has the later message in its history:\n%s", turn.Text, got)
		}
		a.release <- "answer to first"
		turn = a.next(t)
		if got := texts(turn.History); turn.Text != "second" || !strings.Contains(got, "user:first\nassistant:answer to first") {
			t.Fatalf("the second turn (%q) does not have the first exchange in its history:\n%s", turn.Text, got)
		}
		a.release <- "answer to second"
		h.chat.waitFor(t, "the second answer", has("answer to second"))
	})
}

// texts is a history as role:text lines.
func texts(hist []agent.Message) string {
	var out []string
	for _, m := range hist {
		out = append(out, m.Role+":"+m.Text)
	}
	return strings.Join(out, "\n")
}

// A host that adopts inbox rows it had queued itself (taken over while paused, it took them
// back when the other host was paused in turn) queues each row once: a row twice in one turn
// made the turn's ownership check count one row too many, and the turn stopped before it ran,
// its rows left running for ever (found by the promise checker: inbound-one-outcome).
func TestARowQueuedTwiceRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "first")
		a.next(t)
		h.say(dm, "second") // queued behind the running turn
		rows, err := h.e.loadOpen(context.Background(), `text = $1`, "second")
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %+v, %v", rows, err)
		}
		h.e.enqueue(h.key(dm), h.e.itemOf(rows[0])) // as a recovery of the row would
		a.release <- "answer to first"
		turn := a.next(t)
		if turn.Text != "second" {
			t.Fatalf("the turn's text is %q; want the row once", turn.Text)
		}
		a.release <- "answer to second"
		h.inboxOutcome(h.key(dm), "second", stDone, "answered")
	})
}

// With several hosts a chat's turns may run on two at once (each runs the events it recorded):
// a message another host's running turn answers is not in this turn's history, where the model
// would read it as asked again and run its command a second time (found by the promise
// checker: a watch started by two hosts from one message, its match posted twice).
func TestAMessageAnotherTurnAnswersIsNotInTheHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{Instance: "a"})
		h.say(dm, "please run the job")
		a.next(t) // host a runs its turn
		ab := newBlocking()
		b := h.another(ab, Options{Instance: "b"})
		b.say(dm, "meanwhile")
		turn := ab.next(t)
		if got := texts(turn.History); strings.Contains(got, "please run the job") {
			t.Fatalf("host b's turn has host a's open message in its history:\n%s", got)
		}
		a.release <- "started the job"
		ab.release <- "answer to meanwhile"
		h.inboxOutcome(h.key(dm), "please run the job", stDone, "answered")
		b.inboxOutcome(h.key(dm), "meanwhile", stDone, "answered")
		// Answered, it is history again.
		b.say(dm, "and then?")
		turn = ab.next(t)
		if got := texts(turn.History); !strings.Contains(got, "user:please run the job\nassistant:started the job") {
			t.Fatalf("the answered exchange is not in the next turn's history:\n%s", got)
		}
		ab.release <- "done"
	})
}
