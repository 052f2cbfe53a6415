package turn

import (
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// An error event inside a stream reaches the user with the server's status and message, never
// as "HTTP 0": llama.cpp's and vLLM's shapes.
func TestStreamErrorCarriesStatusAndMessage(t *testing.T) {
	for _, c := range []struct {
		name, event, want string
	}{
		{"llama.cpp", `{"error":{"code":500,"message":"llama_decode failed","type":"server_error"}}`, "500: llama_decode failed"},
		{"vllm", `{"object":"error","message":"prompt too long for the KV cache","type":"BadRequestError","code":400}`, "400: prompt too long for the KV cache"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := agenttest.New(t, agenttest.StreamError(c.event, "Hel", "lo"))
			h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{CanEdit: func(string) bool { return true }})
			h.say(dm, "hi")
			m := h.chat.waitFor(t, "the error", has("⚠️"))
			if strings.Contains(m.Text, "HTTP 0") || !strings.Contains(m.Text, c.want) {
				t.Errorf("the user was told %q; want %q", m.Text, c.want)
			}
			if _, out := h.settled(h.key(dm), "hi"); strings.Contains(out, "HTTP 0") || !strings.Contains(out, c.want) {
				t.Errorf("inbox outcome %q", out)
			}
		})
	}
}

// streamPieces is a slow streamed answer: 40 words 150 ms apart.
func streamPieces() []string {
	var pieces []string
	for i := range 40 {
		pieces = append(pieces, "word"+strconv.Itoa(i)+" ")
	}
	return pieces
}

// sent copies what the chat platform was sent.
func (c *chatPlatform) sentCopy() []abi.OutboundMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]abi.OutboundMessage(nil), c.sent...)
}

// /stop during a streamed answer finalises the draft: its last edit ends with "(stopped)", not
// with the "still writing" mark, and nothing is posted in its place.
func TestStopFinalisesTheDraft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := agenttest.NewUnstarted(t, agenttest.Chunks(150*time.Millisecond, streamPieces()...))
		a := modelAgent(t, srv, agent.Config{Transport: srv.Transport()})
		h := newHarness(t, a, Options{CanEdit: func(string) bool { return true }})
		h.say(dm, "tell me a story")
		until(t, "the draft and an edit", func() bool { return len(h.chat.texts()) >= 2 })
		h.say(dm, "/stop")
		until(t, "the stop confirmation", func() bool { return h.chat.count("Stopped.") == 1 })
		time.Sleep(5 * time.Second)
		synctest.Wait()
		var draft []abi.OutboundMessage
		for _, m := range h.chat.sentCopy() {
			if m.Text != "⏹ Stopped." {
				draft = append(draft, m)
			}
		}
		last := draft[len(draft)-1]
		if last.EditMessageID != "1" || strings.HasSuffix(last.Text, streamSuffix) || !strings.HasSuffix(last.Text, DraftStopped) {
			t.Fatalf("the draft's last edit %+v; want it to end with %q", last, DraftStopped)
		}
		for _, m := range draft[1:] {
			if m.EditMessageID == "" {
				t.Fatalf("a new message was posted for the draft: %+v", draft)
			}
		}
	})
}

// A 429 on an edit of the draft waits for the platform's retry_after and then edits: the draft
// is never posted again, and the final text is exact.
func TestFloodOnAnEditWaitsThenEdits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pieces := streamPieces()
		srv := agenttest.NewUnstarted(t, agenttest.Chunks(150*time.Millisecond, pieces...))
		a := modelAgent(t, srv, agent.Config{Transport: srv.Transport()})
		h := newHarness(t, a, Options{CanEdit: func(string) bool { return true }})
		h.say(dm, "tell me a story")
		until(t, "the draft", func() bool { return len(h.chat.texts()) >= 1 })
		h.chat.floodOnce(3 * time.Second) // the next send, an edit
		final := strings.TrimSpace(strings.Join(pieces, ""))
		until(t, "the final text", func() bool { return h.chat.count(final) == 1 })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		sent := h.chat.sentCopy()
		if h.chat.refused() != 1 {
			t.Fatalf("the platform refused %d sends", h.chat.refused())
		}
		for i, m := range sent {
			if (i == 0) != (m.EditMessageID == "") {
				t.Fatalf("send %d: %+v; want one post, then edits only", i, m)
			}
		}
		if sent[len(sent)-1].Text != final {
			t.Fatalf("final %q", sent[len(sent)-1].Text)
		}
	})
}

// Streamed edits are limited per chat and per bot: 40 chats streaming at once through one bot
// make at most Options.EditsPerSecond posts and edits in any second (Telegram allows about 30
// per second per bot), and each chat at most one per EditInterval; every answer still ends exact.
func TestEditRateIsLimitedPerBot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const chats = 40
		pieces := streamPieces()
		srv := agenttest.NewUnstarted(t)
		for range chats {
			srv.Push(agenttest.Chunks(150*time.Millisecond, pieces...))
		}
		a := modelAgent(t, srv, agent.Config{Transport: srv.Transport()})
		h := newHarness(t, a, Options{CanEdit: func(string) bool { return true }, EditsPerSecond: 20})
		for i := range chats {
			src := dm
			src.ChatID, src.UserID = "chat"+strconv.Itoa(i), "u"+strconv.Itoa(i)
			h.say(src, "tell me a story")
		}
		final := strings.TrimSpace(strings.Join(pieces, ""))
		until(t, "every final text", func() bool { return h.chat.count(final) == chats })
		h.chat.mu.Lock()
		all, allAt := append([]abi.OutboundMessage(nil), h.chat.sent...), append([]time.Time(nil), h.chat.at...)
		h.chat.mu.Unlock()
		// The streamed posts and edits: a chat whose answer was complete before its first
		// draft could go gets it as one ordinary reply (the final text, no edit), which the
		// edit rate does not pace.
		var sent []abi.OutboundMessage
		var at []time.Time
		plain := 0
		for i, m := range all {
			if m.EditMessageID == "" && m.Text == final {
				plain++
				continue
			}
			sent, at = append(sent, m), append(at, allAt[i])
		}
		most := 0
		for i := range at {
			n := 0
			for j := i; j < len(at) && at[j].Sub(at[i]) < time.Second; j++ {
				n++
			}
			most = max(most, n)
		}
		if most > 20 {
			t.Errorf("%d sends within one second through one bot, want at most 20", most)
		}
		last := map[string]time.Time{}
		for i, m := range sent {
			if prev, ok := last[m.ChatID]; ok && at[i].Sub(prev) < time.Second {
				t.Errorf("chat %s: two sends %v apart", m.ChatID, at[i].Sub(prev))
			}
			last[m.ChatID] = at[i]
		}
		t.Logf("%d streamed sends (and %d plain replies), at most %d in a second", len(sent), plain, most)
	})
}
