package turn

import (
	"context"
	"strings"
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
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{Commands: map[string]Command{"cron": cron}})
	sid := h.say(dm, "hello").Session.SessionID
	h.chat.waitFor(t, "an answer", has("hello"))
	h.say(dm, "/cron@my_bot ls")
	h.chat.waitFor(t, "the command's answer", has("cron: ls"))
	if got.SessionID != sid || got.Arg != "ls" || got.Source.ChatID != dm.ChatID || got.Key != h.key(dm) || got.Plugin != "echo" {
		t.Fatalf("call %+v (session %s)", got, sid)
	}
	if h.chat.count("I understood") != 1 { // only "hello" reached the agent
		t.Fatalf("the agent answered the command: %q", h.chat.texts())
	}
}
