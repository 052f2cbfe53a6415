package host

import (
	"context"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
)

// The public roles are the host's.
func TestRoles(t *testing.T) {
	for public, internal := range map[string]string{RoleUser: agent.RoleUser, RoleAssistant: agent.RoleAssistant,
		RoleSystem: agent.RoleSystem, RoleTool: agent.RoleTool, RoleNotification: agent.RoleNotification} {
		if public != internal {
			t.Errorf("role %q is %q in the host", public, internal)
		}
	}
}

// A program's agent sees the turn as the host's agents do: the message, the history, and a
// notification's process events as data; its reply is the host's.
func TestAgentAdapter(t *testing.T) {
	exit := 2
	var got *Turn
	a := agentOf(AgentFunc(func(_ context.Context, t *Turn) (*Reply, error) {
		got = t
		return &Reply{Text: "seen"}, nil
	}))
	ev := agent.Notice{Kind: agent.NoticeCompletion, ProcID: "proc_1", Command: "make", State: agent.StateExited, ExitCode: &exit,
		Output: "error: x", OutputCut: true}
	rep, err := a.Turn(context.Background(), &agent.Turn{Key: "k", SessionID: "s", Source: abi.Source{ChatID: "42"}, Text: "make ended",
		Synthetic: true, Notices: []agent.Notice{ev}, Model: "m",
		History: []agent.Message{{Role: agent.RoleUser, Text: "run make"}, {Role: agent.RoleNotification, Text: "started", Notices: []agent.Notice{ev}}}})
	if err != nil || rep.Text != "seen" {
		t.Fatalf("reply %+v %v", rep, err)
	}
	n := got.Notices[0]
	if got.Key != "k" || got.SessionID != "s" || got.Source.ChatID != "42" || !got.Notification || got.Model != "m" ||
		n.Kind != "completion" || n.ProcID != "proc_1" || *n.ExitCode != 2 || n.State != "exited" || !n.OutputCut || n.Output != "error: x" {
		t.Fatalf("turn %+v notice %+v", got, n)
	}
	if len(got.History) != 2 || got.History[1].Role != RoleNotification || got.History[1].Notices[0].Command != "make" {
		t.Fatalf("history %+v", got.History)
	}
	// No reply is an empty answer, not a crash.
	a = agentOf(AgentFunc(func(context.Context, *Turn) (*Reply, error) { return nil, nil }))
	if rep, err := a.Turn(context.Background(), &agent.Turn{}); err != nil || rep == nil || rep.Text != "" {
		t.Fatalf("nil reply: %+v %v", rep, err)
	}
}
