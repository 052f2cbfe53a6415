package turn

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
)

// gatedAgent is an agent whose turns wait until the test opens their text's gate (then answer
// "answer to <text>") or their context ends. A turn whose text is "act" first starts a
// background command through its tools: something running the turn again would repeat.
type gatedAgent struct {
	started chan string
	gates   map[string]chan struct{}
}

func (g *gatedAgent) Turn(ctx context.Context, t *agent.Turn) (*agent.Reply, error) {
	if t.Text == "act" {
		if _, err := t.Tools.Spawn(ctx, agent.SpawnRequest{Command: "true", Background: true}); err != nil {
			return nil, err
		}
	}
	g.started <- t.Text
	select {
	case <-g.gates[t.Text]:
		return &agent.Reply{Text: "answer to " + t.Text}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestDrainFinishesOrHandsBack: a drain lets a turn that finishes in time answer and starts no
// queued turn; when its time is up it hands back the turn that did nothing visible (after the
// restart that one is answered once, with no "restarted" notice), while the turn that started a
// command is left to the restart's recovery (interrupted, the user told), as after a crash.
func TestDrainFinishesOrHandsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedAgent{started: make(chan string, 8), gates: map[string]chan struct{}{
			"quick": make(chan struct{}), "slow": make(chan struct{}), "act": make(chan struct{})}}
		h := newHarness(t, g, Options{})
		chat := func(id string) abi.Source { s := dm; s.ChatID = id; return s }
		for _, text := range []string{"quick", "slow", "act"} {
			h.say(chat(text), text)
		}
		for range 3 {
			<-g.started
		}
		h.say(chat("quick"), "queued behind") // waits for the quick chat's turn

		drained := make(chan bool)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		go func() { drained <- h.e.Drain(ctx) }()
		synctest.Wait()
		close(g.gates["quick"]) // finishes within the drain's time
		h.chat.waitFor(t, "the answer given during the drain", has("answer to quick"))
		if <-drained {
			t.Fatal("Drain reported every turn finished; two were still running at its deadline")
		}
		state := func(text string) (st, out string) {
			t.Helper()
			if err := h.db.QueryRow(`SELECT state, outcome FROM turn_inbox WHERE text = $1`, text).Scan(&st, &out); err != nil {
				t.Fatal(err)
			}
			return st, out
		}
		if st, _ := state("quick"); st != stDone {
			t.Errorf("the turn that finished during the drain is %s, want done", st)
		}
		if st, _ := state("queued behind"); st != stQueued {
			t.Errorf("the message queued behind it is %s, want queued (no turn starts while draining)", st)
		}
		if st, out := state("slow"); st != stQueued || out != handedBack {
			t.Errorf("the turn that did nothing visible is %s %q, want queued (handed back)", st, out)
		}
		if st, _ := state("act"); st != stRunning {
			t.Errorf("the turn that started a command is %s, want running (for the restart's recovery)", st)
		}

		h2 := h.crashAndRestart(agent.NewBuiltin(agent.Config{}))
		h2.inboxOutcome(h.key(chat("quick")), "queued behind", stDone, "answered")
		h2.inboxOutcome(h.key(chat("slow")), "slow", stDone, "answered")
		h2.inboxOutcome(h.key(chat("act")), "act", stInterrupted, "the host restarted")
		h2.chat.waitFor(t, "the restart notice of the turn that acted", has("please send it again"))
		synctest.Wait()
		if n := h2.chat.count("please send it again"); n != 1 {
			t.Errorf("%d restart notices, want 1 (the turn that acted); sent %q", n, h2.chat.texts())
		}
		if n := h.chat.count("answer to quick") + h2.chat.count("answer to quick"); n != 1 {
			t.Errorf("the answer given during the drain was sent %d times", n)
		}
	})
}
