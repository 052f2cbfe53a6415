package turn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
	"github.com/hermes-host/hermes-host/internal/delivery"
)

// gatedCommand is a shell command that waits for the file gate, then prints out (written so
// that the command line itself does not contain out).
func gatedCommand(gate, prefix string, n int) string {
	return `while [ ! -f ` + gate + ` ]; do sleep 0.05; done; echo ` + prefix + `-$((` + "0+" + strings.Repeat("1+", n-1) + "1" + `))`
}

// The seed's scenario with automatic compression: a background process is started, the turn's
// answer takes the conversation past compress_at of the model's context, and the host
// compresses it between turns as /compress would (its confirmation says why); the turn's answer,
// pending in the ledger meanwhile, and the process's notification turn both reach the chat
// once, in the continuation.
func TestAutoCompressBetweenTurns(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	cmd := gatedCommand(gate, "auto-out", 3) // prints auto-out-3
	srv := agenttest.New(t,
		agenttest.ToolCalls(agenttest.Call{ID: "c1", Name: "terminal",
			Args: `{"command":"` + cmd + `","background":true,"notify_on_complete":true}`}),
		agenttest.WithUsage(900, 40, agenttest.Text("Started the job.")),
		agenttest.Text("SUMMARY-AUTO: a job was started."),
		agenttest.Text("The job printed auto-out-3."))
	h := newHarness(t, modelAgent(t, srv, agent.Config{ContextTokens: 1000}), Options{CompressAt: 0.8})
	first := h.say(dm, "start the job")
	h.chat.floodOnce(500 * time.Millisecond) // the answer waits in the ledger while the host compresses
	confirm := h.chat.waitFor(t, "the compression notice", has("getting long for the model"))
	if !strings.Contains(confirm.Text, "about 940 of 1000 tokens") {
		t.Errorf("notice %q", confirm.Text)
	}
	cont := h.current(dm).SessionID
	if cont == first.Session.SessionID {
		t.Fatal("the session was not compressed")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.chat.waitFor(t, "the notification turn's answer", has("The job printed auto-out-3."))
	if row := h.finalRow(delivery.Delivered, "Started the job."); row.SessionID != cont || h.chat.count("Started the job.") != 1 {
		t.Fatalf("the turn's answer: %+v, chat %q", row, h.chat.texts())
	}
	list, _ := h.procs.List(t.Context())
	h.deliveredOnceInto(list[0].ID, "The job printed auto-out-3.", cont)
	reqs := srv.Chats()
	if len(reqs) != 4 || reqs[2].Body["tools"] != nil {
		t.Fatalf("want the turn's two calls, the summary, the notification turn; got %d", len(reqs))
	}
	// The notification turn runs in the continuation: the summary, then the notice.
	if got := roles(reqs[3]); len(got) != 1 || !strings.Contains(got[0], "SUMMARY-AUTO") || !strings.Contains(got[0], "auto-out-3") {
		t.Errorf("the notification turn saw %q", got)
	}
	if tr := transcript(t, h.k, cont); !strings.HasPrefix(tr, "system:Summary of the earlier conversation:\nSUMMARY-AUTO") {
		t.Errorf("continuation %q", tr)
	}
}

// Below compress_at nothing is compressed; without a known context window neither.
func TestNoAutoCompressBelowTheThreshold(t *testing.T) {
	srv := agenttest.New(t, agenttest.WithUsage(700, 50, agenttest.Text("a1")), agenttest.Text("a2"))
	h := newHarness(t, modelAgent(t, srv, agent.Config{ContextTokens: 1000}), Options{CompressAt: 0.8})
	first := h.say(dm, "q1")
	h.chat.waitFor(t, "a1", has("a1"))
	h.say(dm, "q2")
	h.chat.waitFor(t, "a2", has("a2"))
	if h.current(dm).SessionID != first.Session.SessionID || len(srv.Chats()) != 2 {
		t.Fatalf("compressed below the threshold: %d requests", len(srv.Chats()))
	}
}

// The context window comes from the server's /models when the configuration does not give it
// (vLLM's max_model_len).
func TestAutoCompressWithTheServersWindow(t *testing.T) {
	srv := agenttest.New(t, agenttest.WithUsage(3500, 100, agenttest.Text("a1")), agenttest.Text("SUMMARY-W"))
	srv.SetContextWindow(4096)
	h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{CompressAt: 0.8})
	h.say(dm, "q1")
	m := h.chat.waitFor(t, "the compression notice", has("getting long"))
	if !strings.Contains(m.Text, "of 4096 tokens") {
		t.Errorf("notice %q", m.Text)
	}
}

// A model call refused because the conversation does not fit the model's context compresses it
// once and tries the turn again in the continuation: the user gets the answer, the continuation
// holds the summary, the question and the answer; a second overflow is reported, not retried.
func TestContextOverflowCompressesAndRetries(t *testing.T) {
	srv := agenttest.New(t,
		agenttest.Text("a1"),
		agenttest.Error(400, agenttest.VLLMContext),
		agenttest.Text("SUMMARY-OVERFLOW"),
		agenttest.Text("a2 after compressing"))
	h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{CompressAt: 0.8})
	first := h.say(dm, "q1")
	h.chat.waitFor(t, "a1", has("a1"))
	h.say(dm, "q2 is long")
	h.chat.waitFor(t, "the answer after compressing", has("a2 after compressing"))
	h.chat.waitFor(t, "the compression notice", has("no longer fit the model's context"))
	cont := h.current(dm).SessionID
	if cont == first.Session.SessionID {
		t.Fatal("not compressed")
	}
	reqs := srv.Chats()
	if c, _ := reqs[2].Messages()[1]["content"].(string); !strings.Contains(c, "q1") || strings.Contains(c, "q2 is long") {
		t.Errorf("the summary request %q: want the conversation without the turn's own message", c)
	}
	if got := roles(reqs[3]); len(got) != 1 || !strings.Contains(got[0], "SUMMARY-OVERFLOW") || !strings.HasSuffix(got[0], "q2 is long") {
		t.Errorf("the retried turn saw %q", got)
	}
	if tr := transcript(t, h.k, cont); tr != "system:Summary of the earlier conversation:\nSUMMARY-OVERFLOW\nuser:q2 is long\nassistant:a2 after compressing\n" {
		t.Errorf("continuation %q", tr)
	}
	if st, out := h.settled(h.key(dm), "q2 is long"); st != stDone {
		t.Errorf("inbox %s %q", st, out)
	}
	// Overflowing again right after: one more compression, then the error; never a loop.
	srv.Push(agenttest.Error(400, agenttest.LlamaCppContext), agenttest.Text("SUMMARY-2"), agenttest.Error(400, agenttest.LlamaCppContext))
	h.say(dm, "q3")
	m := h.chat.waitFor(t, "the error", has("⚠️"))
	if !strings.Contains(m.Text, "context") {
		t.Errorf("error %q", m.Text)
	}
	if st, _ := h.settled(h.key(dm), "q3"); st != stFailed || len(srv.Chats()) != 7 {
		t.Errorf("inbox %s, %d requests", st, len(srv.Chats()))
	}
}
