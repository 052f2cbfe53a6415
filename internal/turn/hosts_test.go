package turn

import (
	"context"
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
