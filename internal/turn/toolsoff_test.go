package turn

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// counter reads the value of the counter name{label=value} from reg (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// toolResult returns the content of the tool message answering call id in r, or "".
func toolResult(r agenttest.Request, id string) string {
	for _, m := range r.Messages() {
		if m["role"] == "tool" && m["tool_call_id"] == id {
			c, _ := m["content"].(string)
			return c
		}
	}
	return ""
}

// A tool call the model makes although it was offered no tools is refused, never run: with
// agent.tools off (the operator's choice), and for a profile granted no tools (the access
// policy), and for the one tool a profile granted processes only lacks. The model gets a tool result saying so, and the refusal is counted.
func TestToolCallRefusedWhenToolsAreOff(t *testing.T) {
	for _, c := range []struct {
		name         string
		noTools      bool
		shell, procs bool
		reason, says string
		offered      bool // whether the request offers tools
	}{
		{"agent.tools false", true, true, true, "tools_off", agent.ToolsOffResult, false},
		{"profile without the grant", false, false, false, "not_granted", agent.NotGrantedResult, false},
		{"profile granted processes only", false, false, true, "not_granted", ErrNotGranted.Error(), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "NOTOOLS-RAN")
			srv := agenttest.New(t,
				agenttest.ToolCalls(agenttest.Call{ID: "c1", Name: "terminal", Args: `{"command":"touch ` + marker + `"}`}),
				agenttest.Text("I could not run it."))
			reg := prometheus.NewRegistry()
			a := modelAgent(t, srv, agent.Config{NoTools: c.noTools, Metrics: agent.NewMetrics(reg)})
			h := newHarness(t, a, Options{Grants: func(context.Context, string, string, abi.Source) (bool, bool) {
				return c.shell, c.procs
			}})
			h.say(dm, "touch the marker")
			h.chat.waitFor(t, "the answer", has("could not run it"))
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran although tools are off")
			}
			if list, _ := h.procs.List(context.Background()); len(list) != 0 {
				t.Fatalf("a process started: %+v", list)
			}
			reqs := srv.Chats()
			if _, ok := reqs[0].Body["tools"]; ok != c.offered {
				t.Errorf("tools offered: %v, want %v", ok, c.offered)
			}
			if res := toolResult(reqs[1], "c1"); !strings.Contains(res, c.says) {
				t.Errorf("tool result %q, want it to say %q", res, c.says)
			}
			if n := counter(t, reg, "hermes_agent_tool_calls_refused_total", "reason", c.reason); n != 1 {
				t.Errorf("refusals counted %v, want 1", n)
			}
		})
	}
}
