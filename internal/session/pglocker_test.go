package session

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// Two "hosts": two pools on one PostgreSQL database, each with its PostgresLocker. Goroutines of
// both take a few keys' locks at random; inside, a per-key count of holders must be exactly one,
// and a read-modify-write of a counter row (in autocommit statements, so only the lock keeps
// increments from being lost) must lose nothing.
func TestPostgresLockerExcludesAcrossHosts(t *testing.T) {
	b := storetest.Postgres(t)
	dbs := []*sql.DB{b.Open(t), b.Open(t)}
	ctx := context.Background()
	if _, err := dbs[0].ExecContext(ctx, `CREATE TABLE counters (k TEXT PRIMARY KEY, n BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const nKeys, perHost, rounds = 3, 6, 25
	for i := range nKeys {
		if _, err := dbs[0].ExecContext(ctx, `INSERT INTO counters VALUES ($1, 0)`, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	lockers := []*PostgresLocker{NewPostgresLocker(dbs[0]), NewPostgresLocker(dbs[1])}
	var inside [nKeys]atomic.Int32
	var wg sync.WaitGroup
	for h := range lockers {
		for g := range perHost {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					i := (g + r) % nKeys
					key := fmt.Sprint("k", i)
					unlock, err := lockers[h].Lock(ctx, key)
					if err != nil {
						t.Error(err)
						return
					}
					if n := inside[i].Add(1); n != 1 {
						t.Errorf("%d holders of %s at once", n, key)
					}
					var n int64
					err = dbs[h].QueryRowContext(ctx, `SELECT n FROM counters WHERE k = $1`, key).Scan(&n)
					if err == nil {
						time.Sleep(time.Millisecond) // widen the window a second holder would use
						_, err = dbs[h].ExecContext(ctx, `UPDATE counters SET n = $1 WHERE k = $2`, n+1, key)
					}
					if err != nil {
						t.Error(err)
					}
					inside[i].Add(-1)
					unlock()
				}
			}()
		}
	}
	wg.Wait()
	var total int64
	if err := dbs[0].QueryRowContext(ctx, `SELECT SUM(n) FROM counters`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(lockers) * perHost * rounds); total != want {
		t.Fatalf("counters sum to %d, want %d: increments were lost to overlapping holders", total, want)
	}
	for h, l := range lockers {
		if n := l.local.Len(); n != 0 {
			t.Errorf("host %d: %d local lock entries left", h, n)
		}
		if n := dbs[h].Stats().InUse; n != 0 {
			t.Errorf("host %d: %d connections still in use", h, n)
		}
		if n := l.Lost(); n != 0 {
			t.Errorf("host %d lost %d locks", h, n)
		}
	}
}

// A wait for a key another host holds ends when ctx does, holding nothing: at a deadline the
// server gives up the wait itself (no server process is left waiting), on a cancellation the
// client drops it; either way no connection stays in use and the host locks the key as soon as
// the other host lets it go.
func TestPostgresLockerWaitRespectsContext(t *testing.T) {
	b := storetest.Postgres(t)
	a, w := NewPostgresLocker(b.Open(t)), NewPostgresLocker(b.Open(t))
	ctx := context.Background()
	unlockA, err := a.Lock(ctx, "chat")
	if err != nil {
		t.Fatal(err)
	}
	// Deadline: one waiter in PostgreSQL, one queued behind it on the local lock.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			unlock, err := w.Lock(cctx, "chat")
			if err == nil {
				unlock()
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait for a held key: %v, want the context's deadline", err)
		}
	}
	if n := advisoryWaiters(t, w.db); n != 0 {
		t.Errorf("%d server processes still wait for the lock after the deadline", n)
	}
	// Cancellation: the waiter is seen waiting in PostgreSQL, then cancelled.
	cctx, cancel = context.WithCancel(ctx)
	go func() {
		unlock, err := w.Lock(cctx, "chat")
		if err == nil {
			unlock()
		}
		errs <- err
	}()
	waitFor(t, "the waiter in PostgreSQL", func() bool { return advisoryWaiters(t, a.db) == 1 })
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if n := w.local.Len(); n != 0 {
		t.Errorf("%d local lock entries left after the cancelled waits", n)
	}
	if n := w.db.Stats().InUse; n != 0 {
		t.Errorf("%d connections in use after the cancelled waits", n)
	}
	unlockA()
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second) // a hang becomes a failure
	defer lcancel()
	unlock, err := w.Lock(lctx, "chat")
	if err != nil {
		t.Fatalf("lock after the holder left: %v", err)
	}
	unlock()
	if a.Lost()+w.Lost() != 0 {
		t.Errorf("lost locks: %d, %d", a.Lost(), w.Lost())
	}
}

// A server default lock_timeout does not cut a boundary's wait short: the lock sets its own.
func TestPostgresLockerIgnoresServerLockTimeout(t *testing.T) {
	b := storetest.Postgres(t)
	a := NewPostgresLocker(b.Open(t))
	ctx := context.Background()
	if _, err := a.db.ExecContext(ctx, `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET lock_timeout = %L', current_database(), '50ms'); END $$`); err != nil {
		t.Fatal(err)
	}
	w := NewPostgresLocker(b.Open(t)) // its connections start with lock_timeout = 50ms
	unlockA, err := a.Lock(ctx, "chat")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		unlock, err := w.Lock(ctx, "chat")
		if err == nil {
			unlock()
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // past the server's lock_timeout
	unlockA()
	if err := <-done; err != nil {
		t.Fatalf("wait under a server lock_timeout: %v", err)
	}
}

// When the holder's connection dies (its server process is terminated), PostgreSQL releases the
// lock: the other host's waiter gets in while the holder's callback still runs. The holder finds
// out from Boundary.Verify, and its unlock logs the loss and counts it.
func TestPostgresLockerReleasedWhenHolderDies(t *testing.T) {
	b := storetest.Postgres(t)
	var logged bytes.Buffer
	var logMu sync.Mutex
	la := NewPostgresLocker(b.Open(t))
	la.log = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))
	ea := newEnvOn(t, b, Options{Locker: la})
	eb := newEnvOn(t, b, Options{})
	ea.t, eb.t = t, t
	key := ea.key(dm("dies"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang becomes a failure
	defer cancel()

	holding, verified := make(chan struct{}), make(chan error, 1)
	bIn := make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- ea.k.WithBoundary(ctx, key, func(bd *Boundary) error {
			if err := bd.Verify(); err != nil {
				return fmt.Errorf("verify while held: %w", err)
			}
			close(holding)
			<-bIn // host B got in: the lock is gone
			verified <- bd.Verify()
			return nil
		})
	}()
	<-holding
	bDone := make(chan error, 1)
	go func() {
		bDone <- eb.k.WithBoundary(ctx, key, func(*Boundary) error { close(bIn); return nil })
	}()
	// B waits in PostgreSQL behind A's lock.
	waitFor(t, "host B waiting for the advisory lock", func() bool { return advisoryWaiters(t, eb.db) == 1 })
	var pid int
	if err := eb.db.QueryRowContext(ctx, `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.db.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("host B after the holder's connection died: %v", err)
	}
	if err := <-verified; !errors.Is(err, ErrLockLost) {
		t.Fatalf("Verify after the connection died: %v, want ErrLockLost", err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if la.Lost() != 1 {
		t.Fatalf("Lost() = %d, want 1", la.Lost())
	}
	logMu.Lock()
	out := logged.String()
	logMu.Unlock()
	if !strings.Contains(out, "boundary lock lost") || !strings.Contains(out, key) {
		t.Fatalf("no log of the lost lock: %q", out)
	}
	// Both hosts carry on: the broken connection was dropped, not reused.
	ea.resolve(dm("dies"))
	eb.resolve(dm("dies"))
}

// advisoryWaiters counts the advisory locks waited for (not granted) in db's database.
func advisoryWaiters(t *testing.T, db *sql.DB) int {
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// On PostgreSQL, Open takes the advisory lock and turns the route cache off by itself, and
// refuses a LocalLocker, which would not exclude other hosts.
func TestOpenOnPostgresConfiguresTheBoundary(t *testing.T) {
	b := storetest.Postgres(t)
	db := b.Open(t)
	if !store.Shared(db) {
		t.Fatal("not a PostgreSQL database")
	}
	k, err := Open(context.Background(), db, Options{CacheSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, ok := k.locker.(*PostgresLocker); !ok || k.cache != nil {
		t.Fatalf("locker %T, cache %v: want the PostgreSQL lock and no cache", k.locker, k.cache != nil)
	}
	if _, err := Open(context.Background(), db, Options{Locker: NewLocalLocker()}); err == nil {
		t.Fatal("Open took a LocalLocker on PostgreSQL")
	}
	db.SetMaxOpenConns(1) // the lock would take the only connection from the boundary's queries
	if _, err := Open(context.Background(), db, Options{}); err == nil {
		t.Fatal("Open took a pool of one connection")
	}
}
