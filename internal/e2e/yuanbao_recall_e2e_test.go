package e2e

import (
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/internal/agent"
)

// TestYuanbaoRecallLeavesNoQuote (issue 29, item 6): a recalled message is gone from the
// transcript, and so is the bot's answer that quoted it (the built-in agent repeats what it
// understood): no entry of the session contains the text, so the model cannot see it next turn.
func TestYuanbaoRecallLeavesNoQuote(t *testing.T) {
	h := startYuanbaoHost(t, "", "")
	bot := h.bot
	const secret = "my secret plan is blue-falcon-42"
	m := bot.DM(ybAnn, secret)
	h.waitFor("the answer quoting the message", h.has("dm", ybAnn.ID, secret))
	key := "agent:main:yuanbao:dm:" + ybAnn.ID
	if tr := h.transcript(key); strings.Count(tr, secret) != 2 {
		t.Fatalf("before the recall, want the message and the answer quoting it:\n%s", tr)
	}
	bot.RecallDM(ybAnn, m.MsgID)
	eventually(t, "no transcript entry containing the recalled text", func() bool {
		return !strings.Contains(h.transcript(key), secret)
	})
	// The conversation goes on: the next message is answered, and the text does not come back.
	// (The answer to help is the agent's command list, which the first answer did not post.)
	bot.DM(ybAnn, "help")
	h.waitFor("the answer to help", h.has("dm", ybAnn.ID, "a few commands"))
	eventually(t, "help and its answer in the transcript", func() bool {
		return strings.Contains(h.transcript(key), "assistant: "+agent.BuiltinHelp[:40])
	})
	if tr := h.transcript(key); strings.Contains(tr, secret) || !strings.Contains(tr, "user: help\n") {
		t.Fatalf("after the recall:\n%s", tr)
	}
}
