package turn

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/process"
)

var procID = regexp.MustCompile(`proc_[0-9a-f]+`)

// TestProcessToolsStayInTheirKey: two users in one group (one session key each, the default).
// User B cannot poll, log, wait for or kill user A's process: its id is "not found", as an
// unknown id is, and B's ps does not list it. A's process runs on and A's notification arrives.
func TestProcessToolsStayInTheirKey(t *testing.T) {
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
	ann := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatGroup, ChatID: "G", UserID: "ann"}
	bob := ann
	bob.UserID = "bob"
	if h.key(ann) == h.key(bob) {
		t.Fatal("group members share a key; this test needs the default per-user group sessions")
	}
	h.say(ann, "run sleep 1; echo ann-job-done")
	started := h.chat.waitFor(t, "A's start", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "ann-job-done") })
	id := procID.FindString(started.Text)
	if id == "" {
		t.Fatalf("no process id in %q", started.Text)
	}
	for _, cmd := range []string{"poll", "log", "wait", "kill"} {
		h.say(bob, cmd+" "+id)
		h.chat.waitFor(t, "B's "+cmd, func(m abi.OutboundMessage) bool {
			return m.UserID == "bob" && strings.Contains(m.Text, process.ErrNotFound.Error())
		})
	}
	h.say(bob, "ps")
	h.chat.waitFor(t, "B's ps", func(m abi.OutboundMessage) bool { return m.UserID == "bob" && strings.Contains(m.Text, "No processes") })
	// Still running, or (on a loaded machine, B's five turns outlasting the sleep) ended by
	// itself: never killed.
	if in, err := h.procs.Info(context.Background(), id); err != nil || (in.State != process.StateRunning && in.Reason != process.ReasonExit) {
		t.Fatalf("A's process after B's attempts: %+v %v", in, err)
	}
	h.chat.waitFor(t, "A's notification", func(m abi.OutboundMessage) bool {
		return m.UserID == "ann" && strings.Contains(m.Text, "ann-job-done") && !strings.HasPrefix(m.Text, "Started")
	})
	for _, m := range h.chat.texts() {
		if strings.HasPrefix(m, "Stopped "+id) || strings.Contains(m, id+" finished") {
			t.Fatalf("B reached A's process: %q", m)
		}
	}
}

// TestToolsAreGranted: with no tools granted the builtin agent says so and starts nothing; with
// shell only, commands run but the process tools are refused.
func TestToolsAreGranted(t *testing.T) {
	var shell, processes bool
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{
		Grants: func(ctx context.Context, plugin, profile string, src abi.Source) (bool, bool) {
			return shell, processes
		},
	})
	h.say(dm, "sh echo nope")
	h.chat.waitFor(t, "the refusal", has(agent.BuiltinNoTools))
	if list, _ := h.procs.List(context.Background()); len(list) != 0 {
		t.Fatalf("a process started without tools: %+v", list)
	}
	shell = true
	h.say(dm, "sh echo granted-ok")
	h.chat.waitFor(t, "the command's output", has("granted-ok"))
	h.say(dm, "ps")
	h.chat.waitFor(t, "ps refused", has(ErrNotGranted.Error()))
}
