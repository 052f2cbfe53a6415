package humanize

import (
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
)

// A completion's outcome is the ledger's word when it has a row (the process's own, or the
// answer of the notification turn it went to), else the notice queue's, in the words the
// console and ps share.
func TestNoticeOutcome(t *testing.T) {
	one := 1
	ended := process.Info{ID: "proc_1", State: process.StateExited, ExitCode: &one}
	delivered := delivery.Row{ID: "dl_1", Origin: "notify:in_7", State: delivery.Delivered, SessionID: "S2", MessageIDs: []string{"42"},
		Plugin: "telegram", Profile: "main", Target: abi.OutboundMessage{ChatID: "111"}}
	rows := NoticeRows([]delivery.Row{delivered, {ID: "dl_0", Origin: "proc_9", State: delivery.Dropped, Reason: "stale: session_reset"}})
	for name, tc := range map[string]struct {
		p             process.Info
		state, detail string
	}{
		"turn answer": {with(ended, "done", "queued notification turn in_7"), "delivered", "into session S2 as platform message 42 (telegram/main, chat 111)"},
		"own row":     {process.Info{ID: "proc_9", State: process.StateExited, Notice: "done"}, "dropped", "stale: session_reset"},
		"running":     {process.Info{ID: "proc_2", State: process.StateRunning}, "running", "not finished"},
		"none":        {ended, "none", "no completion notice recorded"},
		"suppressed":  {with(ended, "suppressed", ""), "suppressed", "the agent read the result itself"},
		"dropped":     {with(ended, "done", "dropped: user_boundary"), "dropped", "user_boundary"},
		"waiting":     {with(ended, "pending", ""), "pending", "waiting to be delivered"},
	} {
		o := NoticeOutcome(tc.p, rows)
		if o.State != tc.state || o.Detail != tc.detail {
			t.Errorf("%s: %q %q, want %q %q", name, o.State, o.Detail, tc.state, tc.detail)
		}
	}
}

func with(p process.Info, notice, outcome string) process.Info {
	p.Notice, p.NoticeOutcome = notice, outcome
	return p
}
