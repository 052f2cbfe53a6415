package turn

import (
	"context"
	"slices"

	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Commands that act at once, inside the boundary of the event that carries them: /stop, /new and
// /reset (cut), and a message its sender recalled (recall). What they cancel is recorded first,
// in the transaction of the transition; the running turn is cancelled after.

// interrupted is the cause a running turn's context is cancelled with: the command that
// stopped it. The command recorded the interruption before cancelling.
type interrupted struct{ by string }

func (i *interrupted) Error() string { return "interrupted by " + i.by }

// cut carries out /stop, /new and /reset (cmd) inside key's boundary b. The queued work the
// command cancels is taken off the chat's queue first (/stop keeps queued notifications). The
// transition then commits in one transaction together with the record of everything it
// cancels: each dropped turn's inbox row, a ledger drop record for each dropped notification,
// the interruption of the running turn, the command's own row and its confirmation. Only after
// that commit is the running turn's context cancelled. If the transition fails, the queued
// work goes back and nothing is cancelled.
//
// The command is authoritative for the key whichever host owns the rows it cancels (see
// cancelElsewhere): with several hosts on one database, a queued message that another host
// adopted or received is dropped too, and another host's running turn is recorded interrupted.
func (e *Engine) cut(b *session.Boundary, key string, row *inboxRow, cmd, title string) (session.Route, error) {
	by := "/" + cmd
	confirm := "⏹ Stopped."
	if cmd != "stop" {
		confirm = "✨ New conversation started."
	}
	elsewhere, err := e.loadOpen(b.Context(), `session_key = $1 AND owner <> $2`, key, e.opt.Instance)
	if err != nil {
		return session.Route{}, err
	}
	queued, running := e.detach(key, cmd != "stop")
	record := func(tx *store.Tx) error {
		ctx := b.Context()
		for _, it := range queued {
			if _, err := e.settleRows(ctx, tx, false, key, it, stDropped, "cancelled by "+by+" before it ran", stQueued); err != nil {
				return err
			}
		}
		if running != nil {
			to := stInterrupted
			if running.kind == kindNotification {
				to = stDropped
			}
			// Still queued counts: its runner may not have marked it running yet.
			if _, err := e.settleRows(ctx, tx, false, key, running, to, "interrupted by "+by, stRunning, stQueued); err != nil {
				return err
			}
		}
		for _, r := range elsewhere {
			if cmd == "stop" && r.kind == kindNotification && r.state == stQueued {
				continue // /stop keeps queued notifications
			}
			if err := e.cancelElsewhere(ctx, tx, key, e.itemOf(r), by); err != nil {
				return err
			}
		}
		if e.opt.Approvals != nil {
			// The conversation's pending approvals go with it: the turn that waits on one is
			// cancelled below, and a press that comes later finds the request voided.
			if err := e.opt.Approvals.VoidKey(ctx, tx, key, "voided by "+by); err != nil {
				return err
			}
		}
		if _, err := e.setState(ctx, tx, []string{row.id}, stDone, "command "+by, stReceived); err != nil {
			return err
		}
		_, err := e.ledger.EnqueueTx(ctx, tx, e.noticeMsg(row.plugin, row.profile, key, row.src, confirm))
		return err
	}
	var r session.Route
	if cmd == "stop" {
		r, err = b.Stop(record)
	} else {
		r, err = b.Reset(title, record)
	}
	if err != nil {
		e.putBack(key, queued)
		return r, err
	}
	if cmd != "stop" {
		e.setMore(key, nil) // the rest of an answer of the old conversation
	}
	e.cancelRunning(key, running, by)
	return r, nil
}

// cancelElsewhere records that the user's command by cancelled it, a turn whose rows another
// host owns: queued, it is dropped, and that host's runner, which moves it to running only from
// queued (begin), leaves it; running, it is recorded interrupted (a notification turn dropped).
// That host's turn cannot be cancelled from here, but it is fenced: it finds its rows no longer
// running and writes nothing more, no draft, no answer (holds, end), and a turn that had not
// stamped yet does not run (foreground).
func (e *Engine) cancelElsewhere(ctx context.Context, tx *store.Tx, key string, it *item, by string) error {
	n, err := e.settleRows(ctx, tx, false, key, it, stDropped, "cancelled by "+by+" before it ran", stQueued)
	if err != nil || n > 0 {
		return err
	}
	to := stInterrupted
	if it.kind == kindNotification {
		to = stDropped
	}
	_, err = e.settleRows(ctx, tx, false, key, it, to, "interrupted by "+by, stRunning)
	return err
}

// recall handles a message its sender recalled (the transcript is already redacted): a queued
// turn forgets it (and leaves the queue when nothing else is left in it), and a running turn
// that answers it is interrupted. As with /stop, the outcomes are recorded first and the running
// turn is cancelled after. Called inside key's boundary.
func (e *Engine) recall(key, msgID string) {
	if msgID == "" {
		return
	}
	// The recall is authoritative whichever host owns the message's row (see cancelElsewhere).
	elsewhere, err := e.loadOpen(e.ctx, `session_key = $1 AND owner <> $2 AND kind = $3`, key, e.opt.Instance, kindMessage)
	if err != nil {
		e.log.Error("turn: reading the recalled message's rows on other hosts failed", "key", key, "error", err)
	}
	elsewhere = slices.DeleteFunc(elsewhere, func(r inboxRow) bool { return r.src.MessageID != msgID })
	dropped, running := e.forget(key, msgID)
	if len(dropped) == 0 && running == nil && len(elsewhere) == 0 {
		return
	}
	err = e.write(func(ctx context.Context, t *store.Tx) error {
		if _, err := e.setStateAnyOwner(ctx, t, dropped, stDropped, "recalled by the sender before its turn", stQueued); err != nil {
			return err
		}
		for _, r := range elsewhere {
			if err := e.cancelElsewhere(ctx, t, key, e.itemOf(r), "a recall"); err != nil {
				return err
			}
		}
		if running == nil {
			return nil
		}
		// Still queued counts: its runner may not have marked it running yet.
		_, err := e.settleRows(ctx, t, false, key, running, stInterrupted, "interrupted: the sender recalled the message", stRunning, stQueued)
		return err
	})
	if err != nil {
		e.log.Error("turn: recording a recall failed", "key", key, "error", err)
	}
	e.cancelRunning(key, running, "a recall")
}
