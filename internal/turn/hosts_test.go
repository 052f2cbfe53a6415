package turn

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/internal/agent"
)

// Two hosts on one database: host b leaves host a's open turns alone while a is alive, and takes
// them over, once, as a restart would, when a stops (its running foreground turn ends
// interrupted and the user is asked to resend; nothing is answered twice).
func TestTakeOverFromStoppedHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{Instance: "a"})
		h.say(dm, "think hard")
		a.next(t) // host a is running the turn
		var aAlive atomic.Bool
		aAlive.Store(true)
		alive := func(_ context.Context, id string) (bool, error) { return id != "a" || aAlive.Load(), nil }
		b := h.another(agent.NewBuiltin(agent.Config{}), Options{Instance: "b", Alive: alive, AdoptEvery: time.Second})
		time.Sleep(5 * time.Second) // several adoption rounds
		synctest.Wait()
		if n := len(b.chat.texts()); n != 0 {
			t.Fatalf("host b acted on a live host's turn: %q", b.chat.texts())
		}
		// Host a dies mid-turn (no clean stop: its rows stay open and its own).
		h.cancel()
		aAlive.Store(false)
		b.inboxOutcome(h.key(dm), "think hard", stInterrupted, "the host restarted")
		b.chat.waitFor(t, "the restart notice", has("please send it again"))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := b.chat.count("please send it again"); n != 1 {
			t.Fatalf("notice sent %d times: %q", n, b.chat.texts())
		}
	})
}
