package turn

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/hermes-host/hermes-host/internal/agent"
)

// /branch and /resume run as queued commands: the branch starts a new session with the
// transcript copied; /resume goes back to the original.
func TestBranchAndResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
		first := h.say(dm, "remember the milk").Session.SessionID
		h.chat.waitFor(t, "an answer", has("milk"))
		h.say(dm, "/branch experiment")
		h.chat.waitFor(t, "the branch confirmation", has("Branched"))
		branch := h.current(dm).SessionID
		if branch == first || !strings.Contains(transcript(t, h.k, branch), "remember the milk") {
			t.Fatalf("branch %s of %s: %q", branch, first, transcript(t, h.k, branch))
		}
		h.say(dm, "/resume "+first)
		h.chat.waitFor(t, "the resume confirmation", has("Resumed"))
		if got := h.current(dm).SessionID; got != first {
			t.Fatalf("resumed %s, want %s", got, first)
		}
		h.say(dm, "/sessions")
		m := h.chat.waitFor(t, "the session list", has("Sessions of this chat"))
		if !strings.Contains(m.Text, first) {
			t.Fatalf("list %q", m.Text)
		}
		h.say(dm, "/status")
		m = h.chat.waitFor(t, "the status", has("Session key"))
		if !strings.Contains(m.Text, first) {
			t.Fatalf("status %q", m.Text)
		}
		_ = context.Background
	})
}

// An extension command (/cron) runs in its chat's turn order, outside the boundary, with the
// chat's current session, and its answer reaches the chat; the agent never sees it.
func TestExtensionCommand(t *testing.T) {
	var got CommandCall
	cron := CommandFunc(func(ctx context.Context, c CommandCall) string {
		got = c
		return "cron: " + c.Arg
	})
	var mu sync.Mutex
	var seen [][]agent.Message // the history of each turn the agent ran
	echo := agent.Func(func(ctx context.Context, t *agent.Turn) (*agent.Reply, error) {
		mu.Lock()
		seen = append(seen, t.History)
		mu.Unlock()
		return &agent.Reply{Text: "echo: " + t.Text}, nil
	})
	h := newHarness(t, echo, Options{Commands: map[string]Command{"cron": cron}})
	sid := h.say(dm, "hello").Session.SessionID
	h.chat.waitFor(t, "an answer", has("echo: hello"))
	h.say(dm, "/cron@my_bot ls")
	h.chat.waitFor(t, "the command's answer", has("cron: ls"))
	if got.SessionID != sid || got.Arg != "ls" || got.Source.ChatID != dm.ChatID || got.Key != h.key(dm) || got.Plugin != "echo" {
		t.Fatalf("call %+v (session %s)", got, sid)
	}
	h.say(dm, "and now?")
	h.chat.waitFor(t, "the next answer", has("echo: and now?"))
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 { // "hello" and "and now?": the command never reached the agent
		t.Fatalf("the agent ran %d turns", len(seen))
	}
	for _, m := range seen[1] {
		if strings.Contains(m.Text, "/cron") {
			t.Fatalf("the command is in the agent's history: %+v", seen[1])
		}
	}
}
