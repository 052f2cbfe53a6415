package humanize

import (
	"strings"

	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
)

// Outcome is what became of a background process's completion notice, in the ledger's words
// when there is a ledger row: delivered (into which session, as which platform message), dropped
// or failed (and why), or still on its way; else the notice queue's state. `hermes-host ps` and
// the console's processes pages say it alike.
type Outcome struct {
	State  string `json:"state"` // delivered, dropped, failed, pending, sending, queued, suppressed, running, none
	Detail string `json:"detail,omitempty"`
	// Row is the ledger row the outcome is read from, if any.
	Row *delivery.Row `json:"row,omitempty"`
}

// noticeTurn starts the notice outcome of a completion handed to a notification turn; the
// turn's answer is in the ledger with origin notify:<turn>.
const noticeTurn = "queued notification turn "

// NoticeOrigins are the ledger origins (delivery.Filter.Origin) of the rows that tell p's
// outcome: the process's own notice, and the answer of the notification turn it was handed to.
func NoticeOrigins(p process.Info) []string {
	origins := []string{p.ID}
	if turn, ok := strings.CutPrefix(p.NoticeOutcome, noticeTurn); ok {
		origins = append(origins, "notify:"+turn)
	}
	return origins
}

// NoticeOutcome reads what became of p's completion from its notice state and the ledger's
// notification rows by origin (newest first), of which it reads those of NoticeOrigins(p).
func NoticeOutcome(p process.Info, rows map[string][]delivery.Row) Outcome {
	var cand []delivery.Row
	for _, o := range NoticeOrigins(p) {
		cand = append(cand, rows[o]...)
	}
	if len(cand) > 0 {
		r := cand[0] // newest first: the latest word on it
		o := Outcome{State: string(r.State), Row: &r}
		switch r.State {
		case delivery.Delivered:
			o.Detail = "into session " + r.SessionID
			if len(r.MessageIDs) > 0 {
				o.Detail += " as platform message " + strings.Join(r.MessageIDs, ", ")
			}
			o.Detail += " (" + r.Plugin + "/" + r.Profile + ", chat " + r.Target.ChatID + ")"
		default:
			o.Detail = r.Reason
		}
		return o
	}
	switch {
	case !p.State.Final():
		return Outcome{State: "running", Detail: "not finished"}
	case p.Notice == "":
		return Outcome{State: "none", Detail: "no completion notice recorded"}
	case p.Notice == "suppressed":
		return Outcome{State: "suppressed", Detail: "the agent read the result itself"}
	case strings.HasPrefix(p.NoticeOutcome, "dropped"):
		return Outcome{State: "dropped", Detail: strings.TrimPrefix(strings.TrimPrefix(p.NoticeOutcome, "dropped"), ": ")}
	case p.NoticeOutcome != "":
		return Outcome{State: p.Notice, Detail: p.NoticeOutcome}
	}
	return Outcome{State: p.Notice, Detail: "waiting to be delivered"}
}

// NoticeRows groups notification rows by origin, for NoticeOutcome.
func NoticeRows(rows []delivery.Row) map[string][]delivery.Row {
	out := map[string][]delivery.Row{}
	for _, r := range rows {
		if r.Origin != "" {
			out[r.Origin] = append(out[r.Origin], r)
		}
	}
	return out
}
