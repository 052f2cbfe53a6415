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

// The chat commands users of chat assistants expect, end to end (the real binary, echo.wasm,
// the OpenAI-compatible agent on the fake model server): /help, /model (the switch is in the
// request the model server receives, and `sessions show` names the model), /usage, /undo and
// /retry.
func TestChatCommandsEndToEnd(t *testing.T) {
	srv := agenttest.New(t,
		agenttest.WithUsage(100, 20, agenttest.Text("a1")),
		agenttest.WithUsage(200, 40, agenttest.Text("a2")),
		agenttest.Text("a3"),
		agenttest.Text("a3 again"))
	fake := echotest.New()
	defer fake.Close()
	h := newModelHost(t, fake, srv, "models: [qwen3-8b, llama3.2]")
	h.say("q1")
	mustWait(t, fake, "a1", echotest.Has("a1"))
	history := func(i int) string {
		var out []string
		for _, m := range srv.Chats()[i].Messages()[1:] {
			c, _ := m["content"].(string)
			out = append(out, fmt.Sprint(m["role"], ":", c))
		}
		return strings.Join(out, "|")
	}
	t.Run("help", func(t *testing.T) {
		h.say("/help")
		m := mustWait(t, fake, "the help", echotest.Has("Commands:"))
		for _, want := range []string{"/model — ", "/usage — ", "/retry — ", "/undo — ", "/new — "} {
			if !strings.Contains(m.Text, want) {
				t.Errorf("/help lacks %q: %q", want, m.Text)
			}
		}
	})
	t.Run("model", func(t *testing.T) {
		h.say("/model qwen3-8b")
		mustWait(t, fake, "the switch", echotest.Has("now uses the model qwen3-8b"))
		h.say("q2")
		mustWait(t, fake, "a2", echotest.Has("a2"))
		if got := srv.Chats()[1].Body["model"]; got != "qwen3-8b" || srv.Chats()[0].Body["model"] != "test-model" {
			t.Fatalf("the model server was asked for %v, then %v", srv.Chats()[0].Body["model"], got)
		}
		keys, err := runCLI(h.bin, h.data, "sessions", "ls")
		if err != nil {
			t.Fatal(err)
		}
		var key string
		for _, l := range strings.Split(keys, "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.Contains(f[0], ":echo:") {
				key = f[0]
			}
		}
		out, err := runCLI(h.bin, h.data, "sessions", "show", key)
		if err != nil || !strings.Contains(out, "model:       qwen3-8b") {
			t.Fatalf("sessions show %s: %v\n%s", key, err, out)
		}
	})
	t.Run("usage", func(t *testing.T) {
		h.say("/usage")
		mustWait(t, fake, "the usage", echotest.Has("300 prompt tokens and 60 completion tokens (360 in all) in 2 model calls"))
	})
	t.Run("undo", func(t *testing.T) {
		h.say("/undo")
		mustWait(t, fake, "the undo", echotest.Has("Your message “q2” and its answer no longer reach the model"))
		h.say("q3")
		mustWait(t, fake, "a3", echotest.Has("a3"))
		if got := history(2); got != "user:q1|assistant:a1|user:q3" {
			t.Fatalf("after /undo the model saw %q", got)
		}
	})
	t.Run("retry", func(t *testing.T) {
		h.say("/retry")
		mustWait(t, fake, "the new answer", echotest.Has("a3 again"))
		if got := history(3); got != "user:q1|assistant:a1|user:q3" {
			t.Fatalf("the retry asked %q", got)
		}
		if n := len(srv.Chats()); n != 4 {
			t.Fatalf("%d model requests", n)
		}
	})
}
