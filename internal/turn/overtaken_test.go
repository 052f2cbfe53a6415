package turn

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// TestLaterNewCancelsAMessageAppliedAfterIt: a message is recorded, then a /new the user sent
// after it is applied first (it reached another host, or a host that adopted a stopped host's
// rows applied the /new before the message; the promise checker saw the message's answer and
// its process's completion posted after "New conversation started"). The message is cancelled
// as /new would have cancelled it in order: it never runs, and the new conversation does not
// hold it.
func TestLaterNewCancelsAMessageAppliedAfterIt(t *testing.T) {
	synctest.Test(t, testLaterNewCancelsAMessageAppliedAfterIt)
}

func testLaterNewCancelsAMessageAppliedAfterIt(t *testing.T) {
	a := newBlocking()
	h := newHarness(t, a, Options{})
	key := h.key(dm)
	src := dm
	src.MessageID = "early"
	early := &inboxRow{id: newID("in_"), plugin: "echo", profile: "main", eventID: "early", key: key, src: src,
		text: "please run the build", kind: kindMessage, eventKind: abi.EventMessage}
	if _, err := h.e.insert(context.Background(), h.e.db, early, stReceived); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // received strictly later, on the inbox's millisecond clock
	r := h.say(dm, "/new")
	h.inboxOutcome(key, "/new", stDone, "command /new")
	h.e.applyLater([]*inboxRow{early})
	h.inboxOutcome(key, "please run the build", stDropped, "cancelled by /new (sent after it, applied before it)")
	if tr := transcript(t, h.k, r.Session.SessionID); strings.Contains(tr, "please run the build") {
		t.Fatalf("the new conversation holds the earlier message: %q", tr)
	}
	// The chat goes on: a message sent after the /new runs.
	h.say(dm, "hello again")
	if turn := a.next(t); !strings.Contains(turn.Text, "hello again") || strings.Contains(turn.Text, "please run the build") {
		t.Fatalf("the turn after /new: %q", turn.Text)
	}
}
