package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotShared is returned by LockConn on a database that is not shared (Shared): a SQLite
// file is one host's, and its locks are in memory.
var ErrNotShared = errors.New("store: the database is not shared by several hosts; lock in memory")

// ConnLock is a lock that excludes every host sharing a PostgreSQL database: the transaction-
// scoped advisory lock pg_advisory_xact_lock(key), taken in a transaction on a connection of its
// own that stays open until Release. PostgreSQL releases it when that transaction ends, so a
// connection that breaks (network, server restart, pg_terminate_backend) loses the lock while
// its holder may still think it holds it: Verify proves it still does, and Release reports it.
type ConnLock struct {
	conn  *sql.Conn
	begun bool // BEGIN ran on conn
}

// LockConn waits for the advisory lock key on a connection of its own and returns it held. It
// returns ctx's error, holding nothing, when ctx ends first: at ctx's deadline (a caller's bounded
// wait) the server gives up the wait itself (lock_timeout) and the connection survives; an
// explicit cancellation makes pgx drop the connection at once, and the server process that was
// waiting on its behalf ends at the latest when it is granted the lock and finds its client gone.
// On a database that is not shared it returns ErrNotShared.
func LockConn(ctx context.Context, db *sql.DB, key int64) (*ConnLock, error) {
	if !Shared(db) {
		return nil, ErrNotShared
	}
	l := &ConnLock{}
	if err := l.acquire(ctx, db, key); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// acquire opens the transaction and waits for the advisory lock in it, in one round trip. The
// transaction is plain BEGIN and COMMIT statements on the connection rather than a *sql.Tx,
// whose context would roll it back (releasing the lock under a running holder) when the
// caller's context is cancelled, and whose Commit cannot be given a deadline. ctx bounds only
// the waits.
//
// When ctx has a deadline, the server gives up the wait at that deadline itself
// (lock_timeout), and the client waits a little longer, so that the connection survives and no
// server process is left waiting. An explicit cancellation is pgx's: it drops the connection.
func (l *ConnLock) acquire(ctx context.Context, db *sql.DB, key int64) error {
	var err error
	if l.conn, err = db.Conn(ctx); err != nil {
		return err
	}
	timeout := int64(0) // no lock_timeout: wait until ctx is done (overriding a server default)
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		if left <= 0 {
			return context.DeadlineExceeded
		}
		timeout = max(1, left.Milliseconds())
	}
	wctx, cancel := waitContext(ctx)
	defer cancel()
	// No placeholders: one simple-protocol message with three statements.
	_, err = l.conn.ExecContext(wctx, fmt.Sprintf(`BEGIN; SET LOCAL lock_timeout = %d; SELECT pg_advisory_xact_lock(%d)`,
		timeout, key))
	l.begun = true // COMMIT (or its failure) ends whatever part of it ran
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe) && pe.Code == "55P03": // lock_not_available: lock_timeout expired
		return context.DeadlineExceeded
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}

// lockGrace is how much longer than ctx's deadline the client waits for the server to give up
// a lock wait.
const lockGrace = 2 * time.Second

// waitContext returns the context a lock wait runs under: ctx, or, when ctx has a deadline, one
// with lockGrace more (cancelled still when ctx is cancelled for another reason).
func waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d.Add(lockGrace))
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return wctx, func() { stop(); cancel() }
}

// releaseTimeout bounds the COMMIT that releases a lock. When it expires pgx closes the
// connection, which ends the server session and releases the lock all the same.
const releaseTimeout = 10 * time.Second

// Release ends the transaction (releasing the lock if it was taken) and returns the connection.
// It returns the commit's error: an error means the connection had failed, and the lock with it,
// at some point while it was held.
func (l *ConnLock) Release() error {
	var err error
	if l.begun {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_, err = l.conn.ExecContext(ctx, `COMMIT`)
		cancel()
	}
	if l.conn != nil {
		// A connection still in a transaction or broken is discarded by the pool, never reused.
		l.conn.Close()
	}
	return err
}

// Verify proves the lock is still held: a statement on the holding connection succeeds only if
// its session, and with it the transaction holding the lock, is still alive. It costs one round
// trip.
func (l *ConnLock) Verify(ctx context.Context) error {
	_, err := l.conn.ExecContext(ctx, `SELECT 1`)
	return err
}
