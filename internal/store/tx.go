package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
)

// The unit of work. Work that several packages record together (a turn's outcome in the inbox
// and its answer in the ledger; a process event's acknowledgement and the notice it became; a
// /new, the turns it cancels and its confirmation) is one transaction, Update's, that each
// package joins through its own methods taking a *Tx. No package hands out its own transaction
// type or reaches into another's: a package that must act once the work is durable (a ledger
// lane woken for a row it wrote) registers it with AfterCommit, and Update runs it after the
// commit, never after a rollback.

// Tx is one unit of work: a database transaction and what is to run once it commits. It is
// valid only inside the function given to Update, and, like *sql.Tx, not for concurrent use.
type Tx struct {
	tx    *sql.Tx
	after []func()
}

// Update runs fn in one transaction (as WithTx: BEGIN IMMEDIATE on SQLite; SERIALIZABLE on
// PostgreSQL, run again from the start when PostgreSQL aborts it as a conflict) and, once it
// committed, runs the functions fn's writers registered with AfterCommit, in the order they
// were registered. An error from fn rolls everything back, and nothing registered runs; neither
// does anything an attempt that PostgreSQL aborted registered. The outcome is reported to the
// write health as path's (Report).
func Update(ctx context.Context, db *sql.DB, path string, fn func(t *Tx) error) error {
	var t *Tx
	err := WithTx(ctx, db, func(tx *sql.Tx) error {
		t = &Tx{tx: tx}
		return fn(t)
	})
	Report(db, path, err)
	if err != nil {
		return err
	}
	for _, f := range t.after {
		f()
	}
	return nil
}

// AfterCommit registers fn to run once t has committed (see Update).
func (t *Tx) AfterCommit(fn func()) { t.after = append(t.after, fn) }

// ExecContext executes a statement inside t.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query inside t.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row inside t.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares a statement for use inside t (closed when t ends).
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return t.tx.PrepareContext(ctx, query)
}

// StmtContext returns the prepared statement s (prepared on the database) for use inside t.
func (t *Tx) StmtContext(ctx context.Context, s *sql.Stmt) *sql.Stmt { return t.tx.StmtContext(ctx, s) }

// Withdrawals. A message about something can become moot before it is sent: a notice of a
// background process's end, once the agent has read the result itself. The package that knows
// (process) withdraws the subject, inside the unit of work that records why; the package that
// sends (delivery) checks, in the same statement that claims a message for its send, that the
// message's subject has not been withdrawn. Neither calls the other: the answer is data, one
// row per subject in store_withdrawals (created by Open), read and written only through this
// package.

// createWithdrawals creates the withdrawals table: one row per withdrawn subject, with why.
const createWithdrawals = `CREATE TABLE IF NOT EXISTS store_withdrawals (
	subject TEXT PRIMARY KEY,
	reason  TEXT NOT NULL,
	at      BIGINT NOT NULL
)`

// Withdraw records, inside t, that messages about subject are no longer wanted, for reason
// (at is the time, Unix milliseconds). Withdrawing a subject again keeps the first reason.
func (t *Tx) Withdraw(ctx context.Context, subject, reason string, at int64) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO store_withdrawals (subject, reason, at) VALUES ($1, $2, $3)
		ON CONFLICT (subject) DO NOTHING`, subject, reason, at)
	return err
}

// Unwithdraw forgets subject's withdrawal inside t (its messages are gone: the subject's
// records were pruned).
func (t *Tx) Unwithdraw(ctx context.Context, subject string) error {
	_, err := t.tx.ExecContext(ctx, `DELETE FROM store_withdrawals WHERE subject = $1`, subject)
	return err
}

// NotWithdrawn is a condition for a statement's WHERE clause: the subject named by the
// statement's expression subject (a column, or a placeholder) has not been withdrawn. A
// compare-and-set that includes it, such as the claim of a message right before its send,
// checks the withdrawal and makes its change in one statement.
func NotWithdrawn(subject string) string {
	return `NOT EXISTS (SELECT 1 FROM store_withdrawals WHERE subject = ` + subject + `)`
}

// Withdrawn reports whether subject has been withdrawn, and why.
func Withdrawn(ctx context.Context, db *sql.DB, subject string) (reason string, ok bool, err error) {
	err = db.QueryRowContext(ctx, `SELECT reason FROM store_withdrawals WHERE subject = $1`, subject).Scan(&reason)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return reason, err == nil, err
}

// Args collects the arguments of a statement built piece by piece (a filter of optional
// conditions, an IN list) and numbers their placeholders: Add appends an argument and returns
// its placeholder, $1, $2, …, which SQLite and PostgreSQL both read.
type Args []any

// Add appends v and returns its placeholder.
func (a *Args) Add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// List appends vs and returns their placeholders joined by commas, for an IN list.
func (a *Args) List(vs ...any) string {
	ps := make([]string, len(vs))
	for i, v := range vs {
		ps[i] = a.Add(v)
	}
	return strings.Join(ps, ", ")
}

// Placeholders returns n placeholders numbered from first, joined by commas ("$3, $4, $5"),
// for an IN list after first-1 other arguments.
func Placeholders(first, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(first+i)
	}
	return strings.Join(ps, ", ")
}

// Querier is what Strings reads from: a *sql.DB or a *Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Strings runs query on db (a database or a transaction) and returns the first column of its
// rows, as text.
func Strings(ctx context.Context, db Querier, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
