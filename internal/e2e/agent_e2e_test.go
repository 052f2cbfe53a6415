package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// newModelHost is newHost with the OpenAI-compatible agent on the fake model server srv; agent
// holds more settings of the agent section (YAML flow entries, e.g. "context_tokens: 1000").
func newModelHost(t *testing.T, fake *echotest.Server, srv *agenttest.Server, agent string) *host {
	bin, plugins := buildHost(t)
	h := &host{t: t, bin: bin, plugins: plugins, data: t.TempDir()}
	h.config = filepath.Join(h.data, "hermes.yaml")
	if agent != "" {
		agent = ", " + agent
	}
	os.WriteFile(h.config, []byte(fmt.Sprintf(`
agent: {kind: openai, base_url: %q, model: test-model, check: off%s}
demo: {plugin: ""}
plugins:
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "%s/outbox"}
    access:
      main: {allow_all: true, tools: [shell, processes]}
`, srv.URL, agent, fake.URL())), 0o600)
	h.start()
	return h
}

// ledgerRow is a row of /api/deliveries with what these tests read.
type ledgerRow struct {
	State, Reason, Kind, Origin string
	SessionID                   string `json:"session_id"`
	Stamp                       struct {
		SessionID string `json:"session_id"`
	}
	Target struct{ Text string }
}

func (h *host) ledger(state string) []ledgerRow {
	var out struct{ Deliveries []ledgerRow }
	adminRequest(h.t, "GET", h.admin, h.data, "/api/deliveries?state="+state, "", &out)
	return out.Deliveries
}

// gatedJob is a background job the model starts: it waits for the file gate, then prints
// "<tag>-done" (the command line does not contain that text).
func gatedJob(gate, tag string) agenttest.Reply {
	cmd := `while [ ! -f ` + gate + ` ]; do sleep 0.05; done; echo ` + tag + `-$(echo done)`
	return agenttest.ToolCalls(agenttest.Call{ID: "c1", Name: "terminal",
		Args: fmt.Sprintf(`{"command":%q,"background":true,"notify_on_complete":true}`, cmd)})
}

// The seed's scenario with automatic compression, end to end (the real binary, echo.wasm, the
// OpenAI-compatible agent on the fake model server): a background job is started, the turn's
// answer takes the conversation past compress_at of the configured context, and the host
// compresses it between turns; when the job ends its notice is delivered once, into the
// continuation. The same with /new instead: the notice is dropped with a record, and the model
// is never asked about it.
func TestSeedScenarioWithAutoCompression(t *testing.T) {
	t.Run("compressed", func(t *testing.T) {
		gate := filepath.Join(t.TempDir(), "go")
		srv := agenttest.New(t, gatedJob(gate, "seed-auto"),
			agenttest.WithUsage(900, 40, agenttest.Text("Started your job.")),
			agenttest.Text("SUMMARY: the user started a job."),
			agenttest.Text("Your job is done: seed-auto-done."))
		fake := echotest.New()
		defer fake.Close()
		h := newModelHost(t, fake, srv, "context_tokens: 1000, compress_at: 0.8")
		h.say("start the job")
		m := mustWait(t, fake, "the compression notice", echotest.Has("getting long for the model"))
		cont := m.Text[strings.LastIndex(m.Text, " ")+1 : len(m.Text)-1]
		os.WriteFile(gate, nil, 0o600)
		mustWait(t, fake, "the notice in the continuation", echotest.Has("Your job is done: seed-auto-done."))
		var rows []ledgerRow
		eventually(t, "the notice's ledger row", func() bool {
			rows = nil
			for _, r := range h.ledger("") {
				if strings.Contains(r.Target.Text+r.Reason, "seed-auto-done") {
					rows = append(rows, r)
				}
			}
			return len(rows) > 0 && rows[0].State == "delivered"
		})
		if len(rows) != 1 || rows[0].Kind != "notification" || rows[0].SessionID != cont || rows[0].Stamp.SessionID == cont {
			t.Fatalf("want one notification delivered into the continuation %s: %+v", cont, rows)
		}
		if n := fake.Count("seed-auto-done"); n != 1 {
			t.Fatalf("the notice reached the chat %d times", n)
		}
		if got := len(srv.Chats()); got != 4 {
			t.Fatalf("%d model requests, want 4 (turn, turn, summary, notification turn)", got)
		}
	})
	t.Run("new", func(t *testing.T) {
		gate := filepath.Join(t.TempDir(), "go")
		srv := agenttest.New(t, gatedJob(gate, "seed-new"), agenttest.Text("Started your job."))
		fake := echotest.New()
		defer fake.Close()
		h := newModelHost(t, fake, srv, "context_tokens: 1000, compress_at: 0.8")
		h.say("start the job")
		mustWait(t, fake, "the answer", echotest.Has("Started your job."))
		h.say("/new")
		mustWait(t, fake, "the /new confirmation", echotest.Has("New conversation"))
		os.WriteFile(gate, nil, 0o600)
		eventually(t, "the notice dropped with its record", func() bool {
			for _, r := range h.ledger("dropped") {
				if strings.Contains(r.Target.Text, "seed-new-done") && strings.Contains(r.Reason, "user_boundary") {
					return true
				}
			}
			return false
		})
		if fake.Count("seed-new-done") != 0 || len(srv.Chats()) != 2 {
			t.Fatalf("the left conversation's notice went on: chat %d, model requests %d", fake.Count("seed-new-done"), len(srv.Chats()))
		}
	})
}
