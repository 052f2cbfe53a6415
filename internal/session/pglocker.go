package session

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/hermes-host/hermes-host/internal/store"
)

// PostgresLocker is the boundary lock shared by every host on one PostgreSQL database: a
// transaction-scoped advisory lock per key (store.ConnLock of store.LockKey("session:"+key)),
// taken in a transaction on a connection of its own that stays open for the whole critical
// section. Unlock commits that transaction, which releases the lock, and returns the connection
// to the pool. Open uses it by default on a shared database (store.Shared).
//
// Waiters of one host queue on an in-process LocalLocker first, so a key being worked on costs
// one database connection per host however many goroutines wait for it; only the first in line
// waits in PostgreSQL.
//
// Lock returns ctx's error, holding nothing, when ctx ends while it waits. At ctx's deadline
// (TryBoundary's wait) the server gives up the wait itself (lock_timeout) and the connection
// goes back to the pool. An explicit cancellation makes pgx drop the connection at once; the
// server process that was waiting for the lock on its behalf then ends at the latest when it is
// granted the lock and finds its client gone, so it keeps the lock from a live waiter for no
// longer than that.
//
// # A broken connection
//
// PostgreSQL releases the lock when the session holding it ends: if the holder's connection
// breaks (network, server restart, pg_terminate_backend), another host can take the key while
// the holder's callback is still running, and nothing tells the callback. The kernel's own
// writes stay consistent regardless (each is a compare-and-set on the route, in a SERIALIZABLE
// transaction: one that raced fails with ErrConflict), but a check-then-send made under the lost
// lock may overlap a transition on another host. The unlock finds out (its COMMIT fails): it
// logs the key and the error at level Error and counts it (Lost), so an operator sees that the
// boundary was not exclusive for that critical section. Callers that want to know before an
// irreversible step can call Boundary.Verify, which proves the lock is still held.
type PostgresLocker struct {
	db    *sql.DB
	local *LocalLocker
	// holders caps the locks held at once (half the pool): every holder keeps a connection, and
	// its callback needs another one for its queries, so without a cap a burst over many keys
	// could take every connection for locks and leave none for the work, each holder waiting
	// for the others.
	holders chan struct{}
	log     *slog.Logger
	lost    atomic.Int64
}

// NewPostgresLocker returns the boundary lock on the PostgreSQL database db (from
// store.OpenPostgres). Lost locks are logged to slog.Default().
func NewPostgresLocker(db *sql.DB) *PostgresLocker {
	l := &PostgresLocker{db: db, local: NewLocalLocker(), log: slog.Default()}
	if n := db.Stats().MaxOpenConnections; n > 0 {
		l.holders = make(chan struct{}, max(1, n/2))
	}
	return l
}

// Lost returns how many locks this locker found lost when they were released (see the type's
// documentation).
func (l *PostgresLocker) Lost() int64 { return l.lost.Load() }

// LockKey returns the advisory lock key of a session key: the same on every host.
func (l *PostgresLocker) LockKey(key string) int64 { return store.LockKey("session:" + key) }

// Lock implements Locker.
func (l *PostgresLocker) Lock(ctx context.Context, key string) (func(), error) {
	h, err := l.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return h.unlock, nil
}

// pgHold is one held lock: the local lock of the key, a holder slot and the database lock
// (store.ConnLock: a connection whose open transaction holds the advisory lock).
type pgHold struct {
	l           *PostgresLocker
	key         string
	held        *store.ConnLock // nil until taken
	unlockLocal func()
	done        atomic.Bool
}

func (l *PostgresLocker) lock(ctx context.Context, key string) (*pgHold, error) {
	unlockLocal, err := l.local.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	h := &pgHold{l: l, key: key, unlockLocal: unlockLocal}
	if l.holders != nil {
		select {
		case l.holders <- struct{}{}:
		case <-ctx.Done():
			unlockLocal()
			return nil, ctx.Err()
		}
	}
	if h.held, err = store.LockConn(ctx, l.db, l.LockKey(key)); err != nil {
		h.release()
		return nil, fmt.Errorf("session: boundary lock %s: %w", key, err)
	}
	return h, nil
}

// release ends the database lock, gives the holder slot back and leaves the local lock. It
// returns the database lock's release error: an error means its connection had failed, and
// the lock with it.
func (h *pgHold) release() error {
	var err error
	if h.held != nil {
		err = h.held.Release()
	}
	if h.l.holders != nil {
		<-h.l.holders
	}
	h.unlockLocal()
	return err
}

func (h *pgHold) unlock() {
	if !h.done.CompareAndSwap(false, true) {
		panic("session: boundary lock released twice")
	}
	if err := h.release(); err != nil {
		h.l.lost.Add(1)
		h.l.log.Error("session: boundary lock lost while held: its connection failed, so another host may have entered this key's boundary during the critical section",
			"key", h.key, "err", err)
	}
}

// verify proves the lock is still held (store.ConnLock.Verify).
func (h *pgHold) verify(ctx context.Context) error {
	if err := h.held.Verify(ctx); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrLockLost, h.key, err)
	}
	return nil
}

// ErrLockLost: the boundary lock of a distributed Locker may no longer be held (its database
// connection failed), so the critical section is no longer exclusive.
var ErrLockLost = errors.New("session: boundary lock lost")
