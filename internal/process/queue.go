package process

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// Queue is the durable event queue (table process_events) between the registry and the delivery
// layer. An event moves pending → claimed → done, or back to pending (Release, or a claim whose
// lease ran out); the registry moves an undelivered completion to suppressed when the agent
// consumes the result. Done and suppressed are final: such an event is never handed out again,
// across restarts.
//
// Delivery is at least once between Claim and Ack (a host that dies mid-delivery leaves a claim
// that is handed out again after its lease or at the next Recover); the delivery ledger is what
// makes the send itself idempotent.
type Queue struct {
	db   *sql.DB
	now  func() time.Time
	wake chan struct{}
}

func newQueue(db *sql.DB, now func() time.Time) *Queue {
	return &Queue{db: db, now: now, wake: make(chan struct{}, 1)}
}

// Claimed is an event handed to one consumer. Token proves the claim to Ack, Release and Confirm.
type Claimed struct {
	Event
	Token   string
	Attempt int // 1 for the first claim
}

// Wake returns a channel that receives a value whenever new deliverable events were committed.
// It has a buffer of one, so a consumer that was busy still learns that it should Claim again.
func (q *Queue) Wake() <-chan struct{} { return q.wake }

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Claim takes up to max deliverable events, oldest first: pending ones whose Release delay has
// passed, and claimed ones whose lease has expired. Each is leased for lease (at least a second).
func (q *Queue) Claim(ctx context.Context, max int, lease time.Duration) ([]Claimed, error) {
	if max <= 0 {
		max = 1
	}
	if lease < time.Second {
		lease = time.Second
	}
	now := q.now()
	var out []Claimed
	err := store.WithTx(ctx, q.db, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, `SELECT seq, payload, attempts FROM process_events
			WHERE (state = $1 AND not_before <= $2) OR (state = $3 AND lease_until <= $4)
			ORDER BY seq LIMIT $5`, qPending, now.UnixMilli(), qClaimed, now.UnixMilli(), max)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				c       Claimed
				payload string
			)
			if err := rows.Scan(&c.Seq, &payload, &c.Attempt); err != nil {
				rows.Close()
				return err
			}
			seq := c.Seq
			if err := json.Unmarshal([]byte(payload), &c.Event); err != nil {
				rows.Close()
				return fmt.Errorf("process: event %d: %w", seq, err)
			}
			c.Seq = seq
			c.Attempt++
			c.Token = newToken()
			out = append(out, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, c := range out {
			if _, err := tx.ExecContext(ctx, `UPDATE process_events SET state = $1, token = $2, lease_until = $3,
				attempts = $4, updated_at = $5 WHERE seq = $6`,
				qClaimed, c.Token, now.Add(lease).UnixMilli(), c.Attempt, now.UnixMilli(), c.Seq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Next blocks until at least one event can be claimed (or ctx is done) and claims up to max of
// them, as Claim does. It wakes on Wake and, for Release delays and expired leases, at least
// every poll.
func (q *Queue) Next(ctx context.Context, max int, lease, poll time.Duration) ([]Claimed, error) {
	if poll <= 0 {
		poll = time.Second
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	for {
		c, err := q.Claim(ctx, max, lease)
		if err != nil || len(c) > 0 {
			return c, err
		}
		t.Reset(poll)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.wake:
		case <-t.C:
		}
	}
}

// Ack marks a claimed event done with an outcome the CLI shows ("delivered", "dropped:
// session_reset", …). Done is final. It fails with ErrSuppressed if the agent consumed the result
// meanwhile (the event stays suppressed), and with ErrClaimLost if the token no longer holds it.
func (q *Queue) Ack(ctx context.Context, seq int64, token, outcome string) error {
	return q.finishClaim(ctx, q.db, seq, token, qDone, outcome, 0)
}

// AckTx is Ack inside the caller's unit of work: the event is done exactly when what the caller
// wrote in tx (a ledger row, a queued notification turn, the record of a drop) commits.
func (q *Queue) AckTx(ctx context.Context, tx *store.Tx, seq int64, token, outcome string) error {
	return q.finishClaim(ctx, tx, seq, token, qDone, outcome, 0)
}

// Release gives a claimed event back for another attempt, not before retryAfter from now.
func (q *Queue) Release(ctx context.Context, seq int64, token string, retryAfter time.Duration) error {
	err := q.finishClaim(ctx, q.db, seq, token, qPending, "", retryAfter)
	if err == nil {
		q.signal()
	}
	return err
}

// execQuerier is a *sql.DB or a *store.Tx.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (q *Queue) finishClaim(ctx context.Context, db execQuerier, seq int64, token, state, outcome string, after time.Duration) error {
	now := q.now()
	res, err := db.ExecContext(ctx, `UPDATE process_events SET state = $1, outcome = $2, token = '',
		lease_until = 0, not_before = $3, updated_at = $4 WHERE seq = $5 AND token = $6 AND state = $7`,
		state, outcome, now.Add(after).UnixMilli(), now.UnixMilli(), seq, token, qClaimed)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	return whyNot(ctx, db, seq)
}

// Confirm checks, right before the final send (inside the session boundary lock), that the claim
// still holds and the agent has not consumed the result since it was claimed.
func (q *Queue) Confirm(ctx context.Context, seq int64, token string) error {
	var state, tok string
	err := q.db.QueryRowContext(ctx, `SELECT state, token FROM process_events WHERE seq = $1`, seq).Scan(&state, &tok)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrClaimLost
	}
	if err != nil {
		return err
	}
	switch {
	case state == qSuppressed:
		return ErrSuppressed
	case state == qClaimed && tok == token:
		return nil
	}
	return ErrClaimLost
}

func whyNot(ctx context.Context, db execQuerier, seq int64) error {
	var state string
	err := db.QueryRowContext(ctx, `SELECT state FROM process_events WHERE seq = $1`, seq).Scan(&state)
	if err == nil && state == qSuppressed {
		return ErrSuppressed
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return ErrClaimLost
}

// releaseAll returns every claim to pending. Recover calls it: the claims were made by a host
// that is gone.
func (q *Queue) releaseAll(ctx context.Context) (int64, error) {
	res, err := q.db.ExecContext(ctx, `UPDATE process_events SET state = $1, token = '', lease_until = 0,
		updated_at = $2 WHERE state = $3`, qPending, q.now().UnixMilli(), qClaimed)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Record is an event with its queue bookkeeping, for listings and tests.
type Record struct {
	Event
	QueueState string // pending, claimed, done, suppressed
	Outcome    string
	Attempts   int
}

// Events lists the queued events of a process (all processes when procID is empty), oldest first.
func (q *Queue) Events(ctx context.Context, procID string) ([]Record, error) {
	return listEvents(ctx, q.db, procID)
}

func listEvents(ctx context.Context, db *sql.DB, procID string) ([]Record, error) {
	rows, err := db.QueryContext(ctx, `SELECT seq, payload, state, outcome, attempts FROM process_events
		WHERE $1 = '' OR proc_id = $2 ORDER BY seq`, procID, procID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var (
			r       Record
			seq     int64
			payload string
		)
		if err := rows.Scan(&seq, &payload, &r.QueueState, &r.Outcome, &r.Attempts); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(payload), &r.Event); err != nil {
			return nil, fmt.Errorf("process: event %d: %w", seq, err)
		}
		r.Seq = seq
		out = append(out, r)
	}
	return out, rows.Err()
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ListEvents lists the queued events of a process (all when procID is empty), oldest first,
// from any process that can open the database (the CLI).
func ListEvents(ctx context.Context, db *sql.DB, procID string) ([]Record, error) {
	if err := Migrate(ctx, db); err != nil {
		return nil, err
	}
	return listEvents(ctx, db, procID)
}
