package turn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// checkShape fails the test unless r has exactly one system message, the first, and every
// message holding the notice's output (mark) is the user's role, fenced as untrusted.
func checkShape(t *testing.T, what string, r agenttest.Request, mark string) {
	t.Helper()
	msgs := r.Messages()
	for i, m := range msgs {
		role, _ := m["role"].(string)
		c, _ := m["content"].(string)
		if (role == "system") != (i == 0) {
			t.Errorf("%s: message %d is %s; want one system message, first: %q", what, i, role, roles(r))
		}
		if mark != "" && strings.Contains(c, mark) && role != "tool" {
			if role != "user" || !strings.Contains(c, "untrusted") {
				t.Errorf("%s: the notice travels as %s: %q", what, role, c)
			}
		}
	}
}

// The request shape Qwen3-family chat templates accept (and the rank untrusted output gets):
// for a conversation with a tool call, a /compress and a background-process notice, every
// request has exactly one system message, the first; the notice and the summary are never
// system or assistant messages.
func TestRequestShapeOneSystemMessage(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	cmd := `while [ ! -f ` + gate + ` ]; do sleep 0.05; done; echo build-done-$((70+7))` // the output, not the command, says build-done-77
	srv := agenttest.New(t,
		agenttest.ToolCalls(agenttest.Call{ID: "c1", Name: "terminal",
			Args: `{"command":"` + cmd + `","background":true,"notify_on_complete":true}`}),
		agenttest.Text("Started."),
		agenttest.Text("SUMMARY-TEXT: a build was started."),
		agenttest.Text("The build finished."),
		agenttest.ToolCalls(agenttest.Call{ID: "c2", Name: "process", Args: `{"action":"list"}`}),
		agenttest.Text("All done."))
	h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{})
	h.say(dm, "start the build")
	h.chat.waitFor(t, "the start", has("Started."))
	h.say(dm, "/compress")
	h.chat.waitFor(t, "the compress confirmation", has("Compressed"))
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.chat.waitFor(t, "the notification turn's answer", has("The build finished."))
	h.say(dm, "what now?")
	h.chat.waitFor(t, "the last answer", has("All done."))
	reqs := srv.Chats()
	if len(reqs) != 6 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, r := range reqs {
		checkShape(t, "request "+string(rune('1'+i)), r, "build-done-77")
	}
	// The notification turn and the turns after it see the summary as fenced user content and
	// the notice as the user's role; the last request carries the tool call and its result.
	for _, i := range []int{3, 4, 5} {
		found := map[string]bool{}
		for _, m := range reqs[i].Messages()[1:] {
			c, _ := m["content"].(string)
			if strings.Contains(c, "SUMMARY-TEXT") {
				found["summary"] = true
				if m["role"] != "user" {
					t.Errorf("request %d: the summary is a %s message", i+1, m["role"])
				}
			}
			if strings.Contains(c, "build-done-77") {
				found["notice"] = true
			}
		}
		if !found["summary"] || !found["notice"] {
			t.Errorf("request %d lacks the summary or the notice: %q", i+1, roles(reqs[i]))
		}
	}
	if res := toolResult(reqs[5], "c2"); !strings.Contains(res, "processes") {
		t.Errorf("the tool result is missing from the last request: %q", roles(reqs[5]))
	}
}
