package turn

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// logBuffer is a slog destination tests can read while the code under test writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The user is told which limit ended a turn, and the operator sees it in the log and in
// /metrics: turn_timeout while a slow command runs is not "the model took too long"; the
// per-call timeout of a model that does not answer is.
func TestTimeoutsSayWhichLimit(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     agent.Config
		reply   agenttest.Reply
		limit   string
		says    string
		notSays string
		logs    string
	}{
		{"turn_timeout during a command", agent.Config{TurnTimeout: 500 * time.Millisecond},
			agenttest.ToolCalls(agenttest.Call{ID: "c1", Name: "terminal", Args: `{"command":"sleep 30","timeout":120}`}),
			agent.LimitTurn, "agent.turn_timeout", "The model took too long", "during=\"the terminal tool\""},
		{"the model call's timeout", agent.Config{Timeout: 300 * time.Millisecond},
			agenttest.Hang(), agent.LimitModelCall, "The model took too long to answer", "turn_timeout", "during=\"a model call\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := agenttest.New(t, c.reply)
			reg := prometheus.NewRegistry()
			var logs logBuffer
			cfg := c.cfg
			cfg.Metrics = agent.NewMetrics(reg)
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			a := modelAgent(t, srv, cfg)
			h := newHarness(t, a, Options{})
			h.say(dm, "do the slow thing")
			m := h.chat.waitFor(t, "the timeout", has("⚠️"))
			if !strings.Contains(m.Text, c.says) || strings.Contains(m.Text, c.notSays) {
				t.Errorf("the user was told %q; want it to say %q and not %q", m.Text, c.says, c.notSays)
			}
			if n := counter(t, reg, "hermes_agent_timeouts_total", "limit", c.limit); n != 1 {
				t.Errorf("timeouts{limit=%s} = %v, want 1", c.limit, n)
			}
			if l := logs.String(); !strings.Contains(l, "limit="+c.limit) || !strings.Contains(l, c.logs) {
				t.Errorf("log %q", l)
			}
		})
	}
}
