package delivery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// The operator may send a failed message again, from the console or the admin API, but only
// one that certainly never reached the platform: a message that may be in the chat already is
// never sent again by the host (Promise 3; the user asks with /last). A failed row is certain
// when none of these holds:
//
//   - its reason carries UncertainMark (a crash or deadline between writing the send and
//     reading its answer, or the plugin's "uncertain" answer);
//   - the platform accepted a part of it (its message ids, from the plugin's error.accepted);
//   - it is a draft (a streamed answer's preview: its completion follows it);
//   - a later message repeats it already (/last, or an earlier retry's copy, linked to it).
//
// Every other failure happened before the platform acted: the plugin was not loaded or failed,
// the platform answered retryable (io, a 429, not connected) until the attempts ran out, or
// refused it outright (a permanent error without accepted parts). A retry puts the row back to
// pending with fresh attempts, through the same lane and the same guarded send: a guarded
// message whose conversation the user has left since is dropped as stale then, not sent.

// ErrNotRetryable is returned by Retry for a row the operator may not send again; the error
// says why.
var ErrNotRetryable = errors.New("not retryable")

// Retryable is nil when the operator may send r again (see Retry), else why not (wrapping
// ErrNotRetryable). It looks at the row alone; Retry also checks the rows linked to it.
func (r Row) Retryable() error {
	no := func(format string, a ...any) error {
		return fmt.Errorf("%w: delivery %s %s", ErrNotRetryable, r.ID, fmt.Sprintf(format, a...))
	}
	switch {
	case r.State == Dropped:
		return no("was dropped on purpose (%s): the host decided not to send it", r.Reason)
	case r.State != Failed:
		return no("is %s, not failed", r.State)
	case r.Uncertain():
		return no("may have reached the platform (outcome unknown): it is never sent again by the host; the user can ask for it with /last")
	case len(r.MessageIDs) > 0:
		return no("was partly accepted by the platform (message %s): sending it again would duplicate it", strings.Join(r.MessageIDs, ", "))
	case r.Kind == KindDraft:
		return no("is a draft of a streamed answer: its completion is a message of its own")
	}
	return nil
}

// Retry sends a failed row again when its failure certainly had no effect (Row.Retryable, and no
// later message repeats it): it becomes pending with fresh attempts and its lane is woken. The
// write is a compare-and-set on the row as read, so two retries (or a retry and another host)
// cannot both apply. It returns the row as pending, ErrNoMessage for an unknown id, or an error
// wrapping ErrNotRetryable that says why not.
func (l *Ledger) Retry(ctx context.Context, id string) (Row, error) {
	rows, err := l.query(ctx, `WHERE id = $1`, id)
	if err != nil {
		return Row{}, err
	}
	if len(rows) == 0 {
		return Row{}, fmt.Errorf("%w: %s", ErrNoMessage, id)
	}
	r := rows[0]
	if err := r.Retryable(); err != nil {
		return r, err
	}
	var again string
	err = l.db.QueryRowContext(ctx, `SELECT id FROM deliveries WHERE session_key = $1 AND link = $2 AND state <> $3 ORDER BY rowid DESC LIMIT 1`,
		r.Key, r.Group, string(Dropped)).Scan(&again)
	switch {
	case err == nil:
		return r, fmt.Errorf("%w: delivery %s was sent again already (as %s)", ErrNotRetryable, r.ID, again)
	case !errors.Is(err, sql.ErrNoRows):
		return r, err
	}
	now := l.opt.Now()
	why := "sent again by the operator after: " + r.Reason
	var res sql.Result
	err = l.durably(func() (err error) {
		res, err = l.exec(ctx, nil, `UPDATE deliveries SET state = $1, reason = $2, attempts = 0, next_at = $3, updated_at = $4
			WHERE id = $5 AND state = $6 AND attempts = $7 AND reason = $8 AND message_ids = ''`,
			string(Pending), why, now.UnixMilli(), now.UnixMilli(), r.ID, string(r.stored.state), r.stored.attempts, r.Reason)
		return err
	})
	if err != nil {
		return r, err
	}
	if !applied(res) {
		return r, fmt.Errorf("%w: delivery %s changed meanwhile: reload and look again", ErrNotRetryable, r.ID)
	}
	r.State, r.Reason, r.Attempts, r.NextAttempt, r.UpdatedAt, r.stored = Pending, why, 0, now, now, stored{Pending, 0}
	l.publish([]Row{r})
	return r, nil
}
