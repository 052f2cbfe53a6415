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
)

// consume takes process events off the registry's durable queue until ctx ends.
func (e *Engine) consume(ctx context.Context) {
	defer e.wg.Done()
	q := e.procs.Queue()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
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
		case <-q.Wake():
		case <-tick.C:
		}
	}
}

// pickup classifies one event and hands it on: a stale one is recorded as dropped, an
// unverifiable one is retried with backoff (then dropped), a deliverable one becomes a guarded
// text notice or a queued notification turn. The event is acknowledged only once its outcome is
// durable (a ledger row or an inbox row), so a crash never loses it.
func (e *Engine) pickup(ctx context.Context, c process.Claimed) {
	q := e.procs.Queue()
	ev := c.Event
	st := ev.Stamp
	ack := func(outcome string) {
		if err := q.Ack(context.WithoutCancel(ctx), c.Seq, c.Token, outcome); err != nil && !errors.Is(err, process.ErrSuppressed) {
			e.log.Warn("turn: acknowledging a process event failed", "proc", ev.ProcID, "error", err)
		}
	}
	if st.Key == "" || st.Route.ChatID == "" {
		ack("dropped: no route")
		return
	}
	if err := e.k.VerifyRoute(st, st.Route); err != nil {
		// The route would take the notice somewhere the stamped key does not own (a DM/group
		// bleed): never deliver it.
		ack("dropped: " + session.ReasonKeyMismatch)
		e.log.Warn("process notification dropped: route does not match its key", "proc", ev.ProcID, "error", err)
		return
	}
	plugin, ok := e.router.PluginFor(st.Route.Platform, st.Profile)
	if !ok {
		e.retry(ctx, c, "no plugin serves "+st.Route.Platform+" for profile "+st.Profile)
		return
	}
	agentMode := ev.Kind == process.EventCompletion && ev.Notify
	msg := delivery.Message{Plugin: plugin, Profile: st.Profile, Key: st.Key, Target: outbound(st.Route),
		Kind: delivery.KindNotification, Guard: delivery.GuardLineage, Stamp: st, Transcript: true,
		TranscriptRole: agent.RoleNotification, Origin: ev.ProcID}
	if agentMode {
		msg.Text = syntheticText(ev)
	} else {
		msg.Text = noticeText(ev, e.opt.Notifications)
	}
	// A drop is recorded with the full notification even when the mode would show nothing.
	dropped := msg
	if dropped.Text == "" {
		dropped.Text = syntheticText(ev)
	}
	v := e.k.Classify(ctx, st)
	switch {
	case v.Kind == session.Stale:
		// Recorded, never silent; the process's output stays readable with `hermes-host ps log`.
		if _, err := e.ledger.Record(ctx, dropped, delivery.Dropped, "stale: "+v.Reason); err != nil {
			e.retry(ctx, c, "recording the drop failed: "+err.Error())
			return
		}
		ack("dropped: " + v.Reason)
		return
	case !v.Deliverable():
		if c.Attempt >= e.opt.MaxNotifyAttempts {
			e.ledger.Record(ctx, dropped, delivery.Dropped, "unverifiable: "+v.Reason)
			ack("dropped: unverifiable " + v.Reason)
			return
		}
		e.retry(ctx, c, "unverifiable: "+v.String())
		return
	}
	if agentMode {
		row := &inboxRow{id: newID("in_"), plugin: plugin, profile: st.Profile, kind: kindNotification, key: st.Key,
			src: st.Route, text: msg.Text, stamp: st}
		if _, err := e.insert(ctx, row, stQueued); err != nil {
			e.retry(ctx, c, "queueing the notification turn failed: "+err.Error())
			return
		}
		ack("queued notification turn " + row.id)
		e.enqueue(st.Key, &item{kind: kindNotification, ids: []string{row.id}, plugin: plugin, profile: st.Profile,
			src: st.Route, texts: []string{msg.Text}, stamps: []session.Stamp{st}})
		return
	}
	if msg.Text == "" {
		ack("not shown (notifications: " + e.opt.Notifications + ")")
		return
	}
	id, err := e.ledger.Enqueue(ctx, msg)
	if err != nil {
		e.retry(ctx, c, "queueing the notice failed: "+err.Error())
		return
	}
	ack("queued " + id)
}

func (e *Engine) retry(ctx context.Context, c process.Claimed, why string) {
	wait := e.opt.RetryBase << min(c.Attempt-1, 6)
	e.log.Info("process notification retried", "proc", c.ProcID, "attempt", c.Attempt, "why", why, "in", wait)
	if err := e.procs.Queue().Release(context.WithoutCancel(ctx), c.Seq, c.Token, wait); err != nil && !errors.Is(err, process.ErrSuppressed) {
		e.log.Warn("turn: releasing a process event failed", "proc", c.ProcID, "error", err)
	}
}

// synthetic runs a notification turn: it waits its turn behind foreground turns (the queue),
// captures the generation, runs the agent on the narrow path, and queues the answer guarded by
// the process's stamp and that generation (so /stop or /new during it cancels it).
func (e *Engine) synthetic(ctx context.Context, key string, it *item) (string, string) {
	st := it.stamps[0]
	var v session.Verdict
	err := e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		v = b.Classify(st)
		return nil
	})
	if err != nil {
		return stDone, "boundary: " + err.Error()
	}
	switch {
	case v.Kind == session.Stale:
		e.recordDropped(ctx, key, it, "stale: "+v.Reason)
		return stDropped, "stale: " + v.Reason
	case !v.Deliverable():
		it.attempts++
		if it.attempts >= e.opt.MaxNotifyAttempts {
			e.recordDropped(ctx, key, it, "unverifiable: "+v.Reason)
			return stDropped, "unverifiable: " + v.Reason
		}
		// Try again later, behind whatever else the chat has queued.
		time.AfterFunc(e.opt.RetryBase<<min(it.attempts-1, 6), func() {
			if e.ctx.Err() == nil {
				e.enqueue(key, it)
			}
		})
		return "", ""
	}
	src := st.Route
	src.MessageID = "" // never quote a stale message
	input := batchText(it.texts)
	rep, err := e.agent.Turn(ctx, &agent.Turn{
		Key: key, SessionID: v.SessionID, Source: src, Text: input, Synthetic: true,
		History: e.history(ctx, v.SessionID, nil), Tools: e.tools(ctx, it, key, st, true),
	})
	if ctx.Err() != nil {
		return stDropped, "cancelled by /stop or /new"
	}
	msg := delivery.Message{Plugin: it.plugin, Profile: it.profile, Key: key, Target: outbound(src), Kind: delivery.KindNotification,
		Guard: delivery.GuardWork, Stamp: st, Generation: v.Generation, Origin: "notify:" + it.ids[0]}
	outcome := "answered "
	if err != nil {
		// The job's result must not be lost with the model: the plain notice goes out instead,
		// once, saying why; the transcript records it as a notification (program output).
		e.log.Warn("notification turn: the model failed; sending the plain notice", "key", key, "error", err)
		msg.Text = fmt.Sprintf(ModelFailedNotice, agent.UserMessage(err), plainNotice(input))
		msg.Transcript, msg.TranscriptRole = true, agent.RoleNotification
		outcome = "model failed (" + err.Error() + "); plain notice "
	} else {
		msg.Text = rep.Text // media are dropped: notification turns are text only
		if strings.TrimSpace(msg.Text) == "" {
			return stDone, "no answer"
		}
		turnID := it.ids[len(it.ids)-1]
		e.record(ctx, key, v.SessionID, turnID, append([]agent.Message{{Role: agent.RoleNotification, Text: input}}, turnMessages(rep)...))
	}
	msg.Parts, _ = e.capParts(it.plugin, msg.Text)
	id, err := e.ledger.Enqueue(context.WithoutCancel(ctx), msg)
	if err != nil {
		return stDone, "answer not recorded: " + err.Error()
	}
	return stDone, outcome + id
}

// ModelFailedNotice is what a notification turn sends when the model failed: %s is the model's
// error for the user, then the plain notice.
const ModelFailedNotice = "⚠️ The model could not write this update (%s) Here is the plain notice:\n%s"

// plainNotice is the builtin agent's summary of a notification: what happened and the output
// tail, without a model.
func plainNotice(input string) string {
	rep, err := agent.NewBuiltin(agent.Config{}).Turn(context.Background(), &agent.Turn{Text: input, Synthetic: true})
	if err != nil || rep == nil {
		return input
	}
	return rep.Text
}
