package turn

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// The secrets the agent is configured with in the tests below: the API key, a header's value,
// and the value of a ${NAME} reference in the configuration.
const (
	secretKey    = "sk-live-PLANTEDKEY0123456789"
	secretHeader = "hdr-PLANTEDHEADER-abcdef"
	secretEnv    = "env-PLANTEDVALUE-zyxwvu"
)

var planted = []string{secretKey, secretHeader, secretEnv}

// eventually polls cond in real time (outside a synctest bubble) until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// settled waits in real time until the last inbox row of key with text is final, and returns
// its state and outcome.
func (h *harness) settled(key, text string) (state, outcome string) {
	h.t.Helper()
	eventually(h.t, "the inbox row of "+text+" to be final", func() bool {
		err := h.db.QueryRow(`SELECT state, outcome FROM turn_inbox WHERE session_key = ? AND text = ? ORDER BY rowid DESC LIMIT 1`,
			key, text).Scan(&state, &outcome)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			h.t.Fatal(err)
		}
		return state != stReceived && state != stQueued && state != stRunning && state != ""
	})
	return state, outcome
}

func secretAgent(t *testing.T, srv *agenttest.Server, cfg agent.Config) *agent.OpenAI {
	cfg.APIKey = secretKey
	cfg.Headers = map[string]string{"X-Proxy-Token": secretHeader}
	cfg.Secrets = []string{secretEnv}
	return modelAgent(t, srv, cfg)
}

// stored returns what the database keeps that a user or an operator reads: the ledger's rows
// (texts and reasons), the inbox's texts and outcomes, and the transcripts.
func (h *harness) stored(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT target || ' ' || reason FROM deliveries`,
		`SELECT text || ' ' || outcome FROM turn_inbox`,
		`SELECT text FROM session_messages`,
	} {
		rows, err := h.db.QueryContext(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			b.WriteString(s + "\n")
		}
		rows.Close()
	}
	return b.String()
}

// noSecret fails the test if the chat or the database holds a configured secret.
func (h *harness) noSecret(t *testing.T) {
	t.Helper()
	db := h.stored(t)
	for _, s := range planted {
		for _, text := range h.chat.texts() {
			if strings.Contains(text, s) {
				t.Errorf("the chat got the secret %q: %q", s, text)
			}
		}
		if strings.Contains(db, s) {
			t.Errorf("the database holds the secret %q:\n%s", s, db)
		}
	}
}

// A server error that echoes a configured secret (the API key, a header value, a ${NAME}
// value) never shows it to the user nor stores it: every error body of vLLM, llama.cpp server
// and Ollama with the secrets planted in it, for a user's turn, for a notification turn (its
// plain notice says why the model failed), for /compress (its note), and as an error event
// inside a stream.
func TestServerErrorsNeverShowSecrets(t *testing.T) {
	plant := strings.Join(planted, " Bearer ")
	t.Run("turns", func(t *testing.T) {
		srv := agenttest.New(t)
		h := newHarness(t, secretAgent(t, srv, agent.Config{}), Options{})
		for i, b := range agenttest.Bodies {
			srv.Push(agenttest.Error(b.Status, agenttest.Plant(b.Body, plant)))
			if strings.HasSuffix(b.Name, "/context") {
				// A context overflow compresses the conversation (the summary's call fails
				// too) and tries the turn once more.
				srv.Push(agenttest.Error(b.Status, agenttest.Plant(b.Body, plant)), agenttest.Error(b.Status, agenttest.Plant(b.Body, plant)))
			}
			h.say(dm, "question "+b.Name)
			h.settled(h.key(dm), "question "+b.Name)
			eventually(t, "the answer to "+b.Name, func() bool { return h.chat.count("⚠️") > i })
		}
		// The requests did carry the secrets: the test plants what the server really got.
		if got := srv.Chats()[0].Header; got.Get("Authorization") != "Bearer "+secretKey || got.Get("X-Proxy-Token") != secretHeader {
			t.Fatalf("request headers %v", got)
		}
		h.noSecret(t)
	})
	t.Run("notification and compress", func(t *testing.T) {
		b := agenttest.Bodies[5] // llama.cpp loading
		srv := agenttest.New(t, agenttest.Error(b.Status, agenttest.Plant(b.Body, plant)))
		h := newHarness(t, secretAgent(t, srv, agent.Config{}), Options{})
		p := h.spawn(dm, "echo job-output-7", true)
		h.chat.waitFor(t, "the plain notice", has("job-output-7"))
		h.eventDone(p.ID)
		srv.Push(agenttest.Error(b.Status, agenttest.Plant(b.Body, plant)))
		h.say(dm, "/compress")
		h.chat.waitFor(t, "the compress note", has("A plain summary was kept"))
		h.noSecret(t)
	})
	t.Run("stream", func(t *testing.T) {
		srv := agenttest.New(t, agenttest.StreamError(`{"error":{"code":500,"message":"upstream said `+plant+`","type":"server_error"}}`, "Hel", "lo"))
		h := newHarness(t, secretAgent(t, srv, agent.Config{}), Options{CanEdit: func(string) bool { return true }})
		h.say(dm, "hi")
		h.settled(h.key(dm), "hi")
		h.chat.waitFor(t, "the error", has("⚠️"))
		h.noSecret(t)
	})
}
