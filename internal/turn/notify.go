package turn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// consume takes process events off the registry's durable queue until ctx ends.
func (e *Engine) consume(ctx context.Context) {
	defer e.wg.Done()
	q := e.procs.Queue()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-e.drain:
			return // the host is stopping: the events stay queued for the next start
		default:
		}
		batch, err := q.Claim(ctx, 32, 5*time.Minute)
		if err != nil && ctx.Err() == nil {
			e.log.Error("turn: claiming process events failed", "error", err)
		}
		for _, c := range batch {
			e.pickup(ctx, c)
		}
		if len(batch) == 32 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-e.drain:
		case <-q.Wake():
		case <-tick.C:
		}
	}
}

// pickup classifies one event and hands it on: a stale one is recorded as dropped, an
// unverifiable one is retried with backoff (then dropped), a deliverable one becomes a guarded
// text notice or a queued notification turn. The event is acknowledged in the same transaction
// that makes its outcome durable (the ledger row, the record of the drop, or the queued turn's
// inbox row), so it is never acked without one and a crash never loses it.
func (e *Engine) pickup(ctx context.Context, c process.Claimed) {
	ev := c.Event
	st := ev.Stamp
	eventID := fmt.Sprintf("%s#%d", ev.ProcID, c.Seq)
	if st.Key == "" || st.Route.ChatID == "" {
		// Nowhere to record it in the ledger: the event's own outcome (ps) is the record.
		e.log.Warn("process notification dropped: it has no route", "proc", ev.ProcID)
		e.acked(ctx, c, "dropped: no route", nil)
		return
	}
	plugin, ok := e.router.PluginFor(st.Route.Platform, st.Profile)
	if !ok {
		e.retry(ctx, c, "no plugin serves "+st.Route.Platform+" for profile "+st.Profile)
		return
	}
	agentMode := (ev.Kind == process.EventCompletion || ev.Kind == process.EventCorrection) && ev.Notify
	notice := noticeOf(ev)
	msg := delivery.Message{Plugin: plugin, Profile: st.Profile, Key: st.Key, Target: outbound(st.Route),
		Kind: delivery.KindNotification, Guard: delivery.GuardLineage, Stamp: st, Transcript: true,
		TranscriptRole: agent.RoleNotification, Origin: ev.ProcID}
	if agentMode {
		msg.Text = notice.Describe() // the record; the turn hands the agent the notice itself
	} else {
		msg.Text = noticeText(ev, e.opt.Notifications)
	}
	// A drop is recorded with the full notification even when the mode would show nothing.
	dropped := msg
	if dropped.Text == "" {
		dropped.Text = notice.Describe()
	}
	// drop records the notification as dropped with reason and acks the event with outcome, in
	// one transaction.
	drop := func(reason, outcome string) {
		e.acked(ctx, c, "dropped: "+outcome, func(ctx context.Context, t *store.Tx) error {
			_, err := e.ledger.RecordTx(ctx, t, dropped, delivery.Dropped, reason)
			return err
		})
	}
	if err := e.k.VerifyRoute(st, st.Route); err != nil {
		// The route would take the notice somewhere the stamped key does not own (a DM/group
		// bleed): never deliver it.
		e.log.Warn("process notification dropped: route does not match its key", "proc", ev.ProcID, "error", err)
		drop(session.ReasonKeyMismatch+": "+err.Error(), session.ReasonKeyMismatch)
		return
	}
	v := e.k.Classify(ctx, st)
	switch {
	case v.Kind == session.Stale:
		// Recorded, never silent; the process's output stays readable with `hermes-host ps log`.
		drop("stale: "+v.Reason, v.Reason)
		return
	case !v.Deliverable():
		if c.Attempt >= e.opt.MaxNotifyAttempts {
			drop("unverifiable: "+v.Reason, "unverifiable "+v.Reason)
			return
		}
		e.retry(ctx, c, "unverifiable: "+v.String())
		return
	}
	if agentMode {
		row := &inboxRow{id: newID("in_"), plugin: plugin, profile: st.Profile, eventID: eventID, kind: kindNotification,
			key: st.Key, src: st.Route, text: msg.Text, stamp: st, notice: &notice}
		fresh := false
		if !e.acked(ctx, c, "queued notification turn "+row.id, func(ctx context.Context, t *store.Tx) error {
			var err error
			fresh, err = e.insert(ctx, t, row, stQueued)
			return err
		}) || !fresh {
			return // not acked (retried), or a turn for this event exists already
		}
		e.enqueue(st.Key, e.itemOf(*row))
		return
	}
	if msg.Text == "" {
		e.acked(ctx, c, "not shown (notifications: "+e.opt.Notifications+")", nil)
		return
	}
	// The notice is about the process: once the agent reads the result itself, it is moot
	// (process.Subject; checked in the ledger's claim right before the send).
	msg.About = process.Subject(ev.ProcID)
	e.acked(ctx, c, "queued", func(ctx context.Context, t *store.Tx) error {
		_, err := e.ledger.EnqueueTx(ctx, t, msg)
		return err
	})
}

// acked commits fn's writes and the event's acknowledgement (with outcome) in one transaction
// and reports whether it did. If the agent consumed the result meanwhile, nothing is written
// (the event stays suppressed, which is its record). If the store fails, the event is released
// for another attempt.
func (e *Engine) acked(ctx context.Context, c process.Claimed, outcome string, fn func(ctx context.Context, t *store.Tx) error) bool {
	ctx = context.WithoutCancel(ctx) // an outcome decided is recorded even while stopping
	err := store.Update(ctx, e.db, store.PathLedger, func(t *store.Tx) error {
		if fn != nil {
			if err := fn(ctx, t); err != nil {
				return err
			}
		}
		return e.procs.Queue().AckTx(ctx, t, c.Seq, c.Token, outcome)
	})
	switch {
	case err == nil:
		return true
	case errors.Is(err, process.ErrSuppressed):
		e.log.Debug("process notification not needed: the agent read the result", "proc", c.ProcID)
	case errors.Is(err, process.ErrClaimLost):
		e.log.Warn("process notification: the claim was lost (its lease ran out); another pickup handles it", "proc", c.ProcID)
	default:
		e.retry(ctx, c, "recording the outcome failed: "+err.Error())
	}
	return false
}

func (e *Engine) retry(ctx context.Context, c process.Claimed, why string) {
	wait := e.opt.RetryBase << min(c.Attempt-1, 6)
	e.log.Info("process notification retried", "proc", c.ProcID, "attempt", c.Attempt, "why", why, "in", wait)
	if err := e.procs.Queue().Release(context.WithoutCancel(ctx), c.Seq, c.Token, wait); err != nil && !errors.Is(err, process.ErrSuppressed) {
		e.log.Warn("turn: releasing a process event failed; its lease will expire", "proc", c.ProcID, "error", err)
	}
}

// synthetic runs a notification turn: it waits its turn behind foreground turns (the queue),
// classifies the notification inside the boundary, runs the agent on the narrow path, and
// queues the answer guarded by the process's stamp and the generation the turn started at (so
// /stop or /new during it cancels it; compression does not). Whatever becomes of it is recorded
// with the inbox row in one transaction: the answer, or the drop with its ledger record.
func (e *Engine) synthetic(ctx context.Context, key string, it *item) {
	st := it.entries[0].stamp
	var v session.Verdict
	err := e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		v = b.Classify(st)
		return nil
	})
	if ctx.Err() != nil {
		return // interrupted (the command recorded it) or the host is stopping
	}
	if err != nil {
		v = session.Verdict{Kind: session.Unverifiable, Reason: session.ReasonStore, Detail: err.Error(), Err: err}
	}
	switch {
	case v.Kind == session.Stale:
		e.end(key, it, stDropped, "stale: "+v.Reason, nil, stRunning)
		return
	case !v.Deliverable():
		it.attempts++
		if it.attempts >= e.opt.MaxNotifyAttempts {
			e.end(key, it, stDropped, "unverifiable: "+v.Reason, nil, stRunning)
			return
		}
		// Try again later, behind whatever else the chat has queued by then.
		if err := e.write(func(ctx context.Context, t *store.Tx) error {
			_, err := e.settle(ctx, t, key, it, stQueued, "retrying: unverifiable "+v.Reason, stRunning)
			return err
		}); err != nil {
			e.log.Error("turn: re-queueing a notification turn failed", "key", key, "error", err)
			return
		}
		e.later(key, it, e.opt.RetryBase<<min(it.attempts-1, 6))
		return
	}
	src := st.Route
	src.MessageID = "" // never quote a stale message
	notices := it.notices()
	record := agent.DescribeAll(notices)
	rep, err := e.agent.Turn(ctx, &agent.Turn{
		Key: key, SessionID: v.SessionID, Source: src, Text: record, Notices: notices, Synthetic: true,
		History: e.history(ctx, v.SessionID, nil), Tools: e.tools(ctx, it, key, st, true),
		Model: e.sessionModel(ctx, v.SessionID),
	})
	if ctx.Err() != nil {
		return
	}
	msg := delivery.Message{Plugin: it.plugin, Profile: it.profile, Key: key, Target: outbound(src), Kind: delivery.KindNotification,
		Guard: delivery.GuardWork, Stamp: st, Generation: v.Generation, Origin: "notify:" + it.first()}
	state, outcome := stDone, ""
	if err != nil {
		// The job's result must not be lost with the model: the plain notice goes out instead,
		// once, saying why; the transcript records it as a notification (program output).
		e.log.Warn("notification turn: the model failed; sending the plain notice", "key", key, "error", err)
		msg.Text = fmt.Sprintf(ModelFailedNotice, agent.UserMessage(err), agent.Summarize(notices))
		msg.Transcript, msg.TranscriptRole = true, agent.RoleNotification
		state, outcome = stFailed, "model failed ("+err.Error()+"); plain notice"
	} else {
		msg.Text = rep.Text // media are dropped: notification turns are text only
		if strings.TrimSpace(msg.Text) == "" {
			e.end(key, it, stDropped, "the agent gave no answer to the notification", nil, stRunning)
			return
		}
		e.record(ctx, key, v.SessionID, it.last(), append([]agent.Message{{Role: agent.RoleNotification, Text: record, Notices: notices}}, turnMessages(rep)...), rep.Usage)
		defer e.afterTurn(ctx, key, it, rep) // between this turn and the chat's next one
	}
	msg.Parts, _ = e.capParts(it.plugin, msg.Text)
	e.end(key, it, state, outcome, &msg, stRunning)
}

// ModelFailedNotice is what a notification turn sends when the model failed: %s is the model's
// error for the user, then the plain notice.
const ModelFailedNotice = "⚠️ The model could not write this update (%s) Here is the plain notice:\n%s"
