package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/slacktest"
	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
	"github.com/hermes-host/hermes-host/internal/turn"
)

// streamedAnswer is a model answer streamed in pieces long enough for the draft to be posted
// before the answer is finished.
func streamedAnswer(tag string) (agenttest.Reply, string) {
	var pieces []string
	for i := range 24 {
		pieces = append(pieces, fmt.Sprintf("%s-%d ", tag, i))
	}
	return agenttest.Chunks(100*time.Millisecond, pieces...), strings.TrimSpace(strings.Join(pieces, ""))
}

// modelYAML points the host's agent at the fake model server (streaming is the default).
func modelYAML(srv *agenttest.Server) string {
	return fmt.Sprintf("agent: {kind: openai, base_url: %q, model: test-model, check: off}\n", srv.URL)
}

// A streamed answer whose draft's first post is answered 500 after posting reaches the user
// once in full: the real telegram.wasm and slack.wasm against their fakes, the real binary with
// the OpenAI-compatible agent streaming. The chat shows the cut draft and one message marked as
// its completion, never the whole answer twice.
func TestStreamedDraftPostedOnce(t *testing.T) {
	t.Run("telegram", func(t *testing.T) {
		srv := agenttest.New(t)
		reply, full := streamedAnswer("tg")
		srv.Push(reply)
		ann := telegramtest.User{ID: 333, FirstName: "Cy"}
		tg := telegramtest.New(t)
		tg.AddPrivate(ann)
		tg.InjectFault("sendMessage", telegramtest.ServerError(500).AfterEffect())
		bin, plugins := buildHost(t)
		data := t.TempDir()
		cfg := filepath.Join(data, "hermes.yaml")
		os.WriteFile(cfg, []byte(modelYAML(srv)+fmt.Sprintf(`
plugins:
  telegram:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {token: "%s", api_base: "%s"}
    access:
      main: {users: ["333"]}
`, tg.Bot().Token(), tg.URL())), 0o600)
		_, stop := startServe(t, bin, plugins, data, "--config", cfg)
		t.Cleanup(stop)
		tg.Bot().PrivateText(ann, "tell me a story")
		done := func() bool {
			for _, s := range tg.SentTexts(ann.ID, 0) {
				if strings.HasSuffix(s, full) {
					return true
				}
			}
			return false
		}
		if err := tg.Wait(90*time.Second, done); err != nil {
			t.Fatalf("the answer never arrived: %v; sent %q", err, tg.SentTexts(ann.ID, 0))
		}
		checkOnce(t, tg.SentTexts(ann.ID, 0), full)
	})
	t.Run("slack", func(t *testing.T) {
		srv := agenttest.New(t)
		reply, full := streamedAnswer("sl")
		srv.Push(reply)
		h := startSlackHostWith(t, modelYAML(srv), "")
		h.s.InjectFault("chat.postMessage", slacktest.AfterEffect(slacktest.ServerError(500)))
		team := h.s.Team()
		a := team.Mention(slackGeneral, slackAnn, "tell me a story")
		h.waitFor(t, "the complete answer", h.threadHas(team.ID, a.TS, full))
		checkOnce(t, h.s.PostedTexts(team.ID, slackGeneral, a.TS), full)
	})
}

// checkOnce requires that texts (a chat's messages, as they read now) hold the whole answer
// full exactly once, in a message marked as completing the interrupted draft.
func checkOnce(t *testing.T, texts []string, full string) {
	t.Helper()
	n := 0
	for _, s := range texts {
		if strings.Contains(s, full) {
			n++
			if !strings.HasPrefix(s, turn.DraftResumed+"\n") {
				t.Errorf("the complete answer does not say it completes the interrupted draft: %q", s)
			}
		}
	}
	if n != 1 {
		t.Fatalf("the whole answer reached the chat %d times: %q", n, texts)
	}
}
