package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/humanize"
	"github.com/hermes-host/hermes-host/internal/process"
)

// Output shown of a process: the page's tail, and the most one event of the live tail carries.
const (
	outputTail  = 16 << 10
	outputChunk = 16 << 10
)

// procView is one background process with what became of its completion.
type procView struct {
	process.Info
	Outcome outcome
}

// outcome is what became of a process's completion notice (humanize.NoticeOutcome, which
// `hermes-host ps` shows too).
type outcome = humanize.Outcome

// notices returns the ledger rows of process notices, by origin (a process id, or notify:ID for
// the answer of a notification turn).
func (c *Console) notices(ctx context.Context) (map[string][]delivery.Row, error) {
	rows, err := c.Ledger.List(ctx, delivery.Filter{Kind: delivery.KindNotification, Limit: 1000})
	if err != nil {
		return nil, err
	}
	return humanize.NoticeRows(rows), nil
}

// outcomeOf reads what became of p's completion from its notice state and the ledger rows.
func outcomeOf(p process.Info, rows map[string][]delivery.Row) outcome {
	return humanize.NoticeOutcome(p, rows)
}

type processesView struct {
	Procs  []procView
	Search string
	Pages  pager
	FP     string `json:"-"` // the fingerprint of the rest (live updates)
}

// processesData reads one page of processes: ?q=TEXT (in the id, command or session key),
// ?offset=N, ?limit=N (default 50, at most 500).
func (c *Console) processesData(ctx context.Context, q url.Values) (processesView, error) {
	offset, limit := paging(q)
	v := processesView{Search: q.Get("q")}
	list, err := c.Processes.Page(ctx, process.Filter{Search: v.Search, Offset: offset, Limit: limit})
	if err != nil {
		return v, err
	}
	rows, err := c.notices(ctx)
	if err != nil {
		return v, err
	}
	v.Procs = make([]procView, 0, len(list))
	for _, p := range list {
		v.Procs = append(v.Procs, procView{Info: p, Outcome: outcomeOf(p, rows)})
	}
	v.Pages = pagerOf(Prefix+"processes", q, offset, limit, len(list))
	return v, nil
}

// one returns process id with what became of its completion, reading only its own ledger rows.
func (c *Console) one(ctx context.Context, id string) (procView, error) {
	p, err := c.Processes.Inspect(ctx, id)
	if err != nil {
		return procView{}, err
	}
	rows := map[string][]delivery.Row{}
	for _, o := range humanize.NoticeOrigins(p) {
		if rows[o], err = c.Ledger.List(ctx, delivery.Filter{Kind: delivery.KindNotification, Origin: o}); err != nil {
			return procView{}, err
		}
	}
	return procView{Info: p, Outcome: outcomeOf(p, rows)}, nil
}

func (c *Console) processesPage(w http.ResponseWriter, r *http.Request, s *login) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	v, err := c.processesData(ctx, r.URL.Query())
	if err != nil {
		c.fail(w, r, s, http.StatusInternalServerError, err)
		return
	}
	v.FP = fingerprint(v)
	c.render(w, r, http.StatusOK, "processes", s, "Processes", v)
}

type processView struct {
	procView
	Output    string
	Next      int64 // where the live tail continues
	Truncated bool  // older output is not shown
}

// processPage shows one process: its stamp, state and outcome, and the tail of its output, which
// the page's script keeps following while the process runs.
func (c *Console) processPage(w http.ResponseWriter, r *http.Request, s *login) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	id := r.PathValue("id")
	p, err := c.one(ctx, id)
	switch {
	case errors.Is(err, process.ErrNotFound):
		c.fail(w, r, s, http.StatusNotFound, fmt.Errorf("no process %q", id))
		return
	case err != nil:
		c.fail(w, r, s, http.StatusInternalServerError, err)
		return
	}
	ch, err := c.Processes.ReadLog(ctx, id, -outputTail, outputTail)
	if err != nil {
		c.fail(w, r, s, http.StatusInternalServerError, err)
		return
	}
	c.render(w, r, http.StatusOK, "processes-show", s, "Process "+id, processView{procView: p,
		Output: validUTF8(ch.Data), Next: ch.Next, Truncated: ch.Offset > 0})
}

// outputEvent carries new output of a process, or its end.
type outputEvent struct {
	Text   string `json:"text,omitempty"`
	Next   int64  `json:"next"`
	Ended  bool   `json:"ended,omitempty"`
	State  string `json:"state,omitempty"`
	Reset  bool   `json:"reset,omitempty"` // output before Next is gone: the shown tail restarts
	Detail string `json:"detail,omitempty"`
}

// processEvents streams a process's new output from ?after= (or Last-Event-ID): "output" events
// (id: the offset after them) and, once it ends, an "end" event with its final state.
func (c *Console) processEvents(w http.ResponseWriter, r *http.Request, s *login) {
	id := r.PathValue("id")
	ctx := r.Context()
	if _, err := c.Processes.ReadLog(ctx, id, 0, 1); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	st := startStream(w)
	next := resumeFrom(r)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	quiet := time.Now()
	for c.logins.alive(s) {
		ch, err := c.Processes.ReadLog(ctx, id, next, outputChunk)
		if err != nil {
			return
		}
		data := ch.Data
		if !ch.Ended {
			data = wholeRunes(data) // the rest of a split character comes with the next event
		}
		if len(data) > 0 {
			ev := outputEvent{Text: validUTF8(data), Next: ch.Offset + int64(len(data)), Reset: ch.Offset > next}
			if st.send("output", fmt.Sprint(ev.Next), ev) != nil {
				return
			}
			next, quiet = ev.Next, time.Now()
			if ev.Next < ch.Total {
				continue // more is waiting
			}
		}
		if ch.Ended && next >= ch.Total {
			c.followOutcome(ctx, st, s, id, next)
			return
		}
		if time.Since(quiet) > keepAlive {
			if st.ping() != nil {
				return
			}
			quiet = time.Now()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		case <-c.done:
			return
		}
	}
}

// wholeRunes cuts an incomplete UTF-8 sequence off the end of b.
func wholeRunes(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// followOutcome sends a process's end, then what becomes of its completion notice as it
// happens: an "outcome" event each time it changes, until it is settled (or a minute passed).
func (c *Console) followOutcome(ctx context.Context, st *stream, s *login, id string, next int64) {
	sent := false
	var last outcome
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && c.logins.alive(s); {
		p, err := c.one(ctx, id)
		if err != nil {
			return
		}
		if !sent {
			if st.send("end", "", outputEvent{Ended: true, Next: next, State: string(p.State) + ", exit " + p.ExitStatus()}) != nil {
				return
			}
			sent = true
		}
		if p.Outcome.State != last.State || p.Outcome.Detail != last.Detail {
			last = p.Outcome
			if st.send("outcome", "", map[string]string{"state": last.State, "detail": last.Detail}) != nil {
				return
			}
		}
		if settled(last.State) {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		case <-c.done:
			return
		}
	}
}

// settled reports an outcome that will not change any more.
func settled(state string) bool {
	switch state {
	case "delivered", "dropped", "failed", "suppressed", "none":
		return true
	}
	return false
}

// validUTF8 is b as text, with invalid bytes replaced.
func validUTF8(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
