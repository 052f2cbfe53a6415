package turn

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/store"
)

// The durable records of a turn's end: its inbox rows' outcome, written in one transaction with
// whatever goes with it (its answer's ledger rows, the drop records of notifications).

// errOvertaken: the turn's rows were no longer in the expected state (a /stop or /new recorded
// the turn's interruption first); what the turn wanted to record is discarded.
var errOvertaken = errors.New("turn: overtaken by a command")

// end records how it's turn ended, in one transaction: its inbox rows move from one of the
// from states to state with outcome, answer (if any) is queued in the ledger (the outcome says
// which message), and notifications that end dropped get their ledger drop records. A turn
// whose rows are no longer in a from state (a /stop or /new recorded its interruption first)
// writes nothing, and its answer is discarded. The messages that go with the turn's answer
// (it.before, it.after: attachment refusals, files) are queued in the same transaction.
func (e *Engine) end(key string, it *item, state, outcome string, answer *delivery.Message, from ...string) {
	err := e.write(func(ctx context.Context, t *store.Tx) error {
		out := outcome
		for _, m := range it.before {
			if _, err := e.ledger.EnqueueTx(ctx, t, m); err != nil {
				return err
			}
		}
		if answer != nil {
			g, err := e.ledger.EnqueueTx(ctx, t, *answer)
			if err != nil {
				return err
			}
			out = strings.TrimPrefix(out+"; answered "+g, "; ")
		}
		for _, m := range it.after {
			g, err := e.ledger.EnqueueTx(ctx, t, m)
			if err != nil {
				return err
			}
			out = strings.TrimPrefix(out+"; file "+g, "; ")
		}
		n, err := e.settle(ctx, t, key, it, state, out, from...)
		if err == nil && n == 0 {
			err = errOvertaken
		}
		return err
	})
	switch {
	case errors.Is(err, errOvertaken):
		e.log.Debug("turn: outcome already recorded by a command", "key", key, "ids", it.ids())
	case err != nil:
		// The rows stay as they were; Start deals with them after a restart.
		e.log.Error("turn: recording a turn's outcome failed", "key", key, "ids", it.ids(), "state", state, "error", err)
	}
}

// settle moves it's inbox rows that are in one of the from states to state with outcome, and
// writes a ledger drop record for each notification row it drops. It returns how many rows moved.
func (e *Engine) settle(ctx context.Context, t *store.Tx, key string, it *item, state, outcome string, from ...string) (int, error) {
	return e.settleRows(ctx, t, true, key, it, state, outcome, from...)
}

// settleRows is settle, fenced by this host's ownership of the rows (a turn's own outcome) or
// not (what a user's command on the key cancels: see setStateAnyOwner).
func (e *Engine) settleRows(ctx context.Context, t *store.Tx, fenced bool, key string, it *item, state, outcome string, from ...string) (int, error) {
	moved, err := e.move(ctx, t, fenced, it.ids(), state, outcome, from...)
	if err == nil && len(moved) > 0 {
		e.opt.Metrics.finish(t, it, state)
	}
	if err != nil || state != stDropped || it.kind != kindNotification {
		return len(moved), err
	}
	for _, en := range it.entries {
		if !slices.Contains(moved, en.id) {
			continue
		}
		if _, err := e.ledger.RecordTx(ctx, t, e.dropRecord(key, it, en), delivery.Dropped, outcome); err != nil {
			return 0, err
		}
	}
	return len(moved), nil
}

// dropRecord is the ledger's record of the notification en of it, which will not be delivered.
func (e *Engine) dropRecord(key string, it *item, en entry) delivery.Message {
	origin, _, _ := strings.Cut(en.event, "#")
	return delivery.Message{Plugin: it.plugin, Profile: it.profile, Key: key, Target: outbound(en.stamp.Route),
		Text: en.text, Kind: delivery.KindNotification, Guard: delivery.GuardLineage, Stamp: en.stamp, Origin: origin}
}

// writeAttempts bounds the retries of one durable write while the store fails.
const writeAttempts = 5

// whileRefused runs fn, one statement that either applies or not, again while the store
// refuses writes (store.Refused).
func (e *Engine) whileRefused(fn func() error) error {
	return e.retrying("turn: the store refused a transcript write; retrying", store.Refused, fn)
}

// write runs fn in one unit of work (the inbox rows and the ledger rows it writes through t commit
// together), retrying with backoff while the store fails. errOvertaken is not retried.
func (e *Engine) write(fn func(ctx context.Context, t *store.Tx) error) error {
	ctx := context.WithoutCancel(e.ctx)
	return e.retrying("turn: write failed; retrying", func(err error) bool { return !errors.Is(err, errOvertaken) },
		func() error {
			return store.Update(ctx, e.db, store.PathLedger, func(t *store.Tx) error { return fn(ctx, t) })
		})
}

// retrying runs fn again with backoff (50 ms, doubling; at most writeAttempts times) while it
// fails with an error again accepts and the engine runs, logging each retry as what.
func (e *Engine) retrying(what string, again func(error) bool, fn func() error) error {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !again(err) || attempt == writeAttempts || e.ctx.Err() != nil {
			return err
		}
		e.log.Warn(what, "attempt", attempt, "error", err)
		time.Sleep(wait)
		wait *= 2
	}
}

// notice sends a host message into the chat (a command confirmation, an error), unguarded: it
// answers something the user just did.
func (e *Engine) notice(ctx context.Context, plugin, profile, key string, src abi.Source, text string) {
	if _, err := e.ledger.Enqueue(context.WithoutCancel(ctx), e.noticeMsg(plugin, profile, key, src, text)); err != nil {
		e.log.Error("turn: notice not recorded", "key", key, "error", err)
	}
}

func (e *Engine) noticeMsg(plugin, profile, key string, src abi.Source, text string) delivery.Message {
	return delivery.Message{Plugin: plugin, Profile: profile, Key: key, Target: outbound(src), Text: text, Kind: delivery.KindNotice}
}
