package store_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// refuse makes the backend's store refuse writes the way it really does, until the returned
// function is called: on SQLite another connection holds the write lock (a second host, a
// stuck transaction, a backup); on PostgreSQL the database turns read-only, as a standby is,
// and its connections are dropped so that every new one is.
func refuse(t *testing.T, b storetest.Backend) (release func()) {
	t.Helper()
	ctx := context.Background()
	if b.Name == "sqlite" {
		other, err := store.Open(filepath.Join(b.Dir, "hermes.db"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := other.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			t.Fatal(err)
		}
		done := false
		release = func() {
			if !done {
				done = true
				conn.ExecContext(ctx, `ROLLBACK`)
				conn.Close()
				other.Close()
			}
		}
		t.Cleanup(release)
		return release
	}
	// One connection of its own, opened before the change and kept until after it: the pool
	// under test keeps none that was opened before the change.
	admin, err := store.OpenPostgres(ctx, b.Source, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := conn.QueryRowContext(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	readOnly := func(on bool) {
		setting := "off"
		if on {
			setting = "on"
		}
		for _, q := range []string{
			`ALTER DATABASE ` + name + ` SET default_transaction_read_only = ` + setting,
			// The setting applies to new connections: end the others.
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
		} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	readOnly(true)
	done := false
	release = func() {
		if !done {
			done = true
			readOnly(false)
			conn.Close()
			admin.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// waitFor polls cond until it holds (failing the test after a minute).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestIdleProbeNoticesARefusingStore: nothing writes, the store starts refusing writes, and the
// probe notices within 2 s, naming itself and the store's error; once the store takes writes
// again the probe clears it, without anything else writing. On both backends.
func TestIdleProbeNoticesARefusingStore(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		db := b.Open(t)
		h := store.HealthOf(db)
		if h == nil {
			t.Fatal("no write health for a database store opened")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go h.Watch(ctx, nil)
		if err := h.Err(); err != nil {
			t.Fatalf("a new store is failing: %v", err)
		}
		start := time.Now()
		release := refuse(t, b)
		waitFor(t, "the probe to notice", func() bool { return h.Err() != nil })
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("the refusing store was noticed after %v, want within 2s", took)
		}
		f := h.Failing()
		if len(f) != 1 || f[0].Path != store.PathProbe || f[0].Error == "" {
			t.Fatalf("failing %+v", f)
		}
		t.Logf("noticed after %v: %v", time.Since(start).Round(time.Millisecond), h.Err())
		release()
		waitFor(t, "recovery", func() bool { return h.Err() == nil })
	})
}

// TestReportedRefusalUntilProbeSucceeds: a path reports a write the store refused; Err names the
// path and the store's error at once. Writes that failed for other reasons (a constraint, a
// cancelled context) are not refusals. After the store takes writes again, the probe clears the
// failure once the path has been quiet for store.Quiet, though the path itself never writes again.
func TestReportedRefusalUntilProbeSucceeds(t *testing.T) {
	b := storetest.SQLite(t)
	db := b.Open(t)
	h := store.HealthOf(db)
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t (id) VALUES (1)`); err != nil {
		t.Fatal(err)
	}

	_, dup := db.Exec(`INSERT INTO t (id) VALUES (1)`)
	store.Report(db, store.PathInbox, dup)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, canceled := db.ExecContext(cctx, `INSERT INTO t (id) VALUES (2)`)
	store.Report(db, store.PathLedger, canceled)
	if dup == nil || canceled == nil || h.Err() != nil {
		t.Fatalf("a constraint (%v) or a cancelled context (%v) made the store failing: %v", dup, canceled, h.Err())
	}

	release := refuse(t, b)
	short, err := store.Open(filepath.Join(b.Dir, "hermes.db"), store.Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	_, busy := short.Exec(`INSERT INTO t (id) VALUES (3)`)
	if !store.Refused(busy) {
		t.Fatalf("SQLite's busy error %v is not a refusal", busy)
	}
	refusedAt := time.Now()
	store.Report(db, store.PathInbox, busy)
	err = h.Err()
	if err == nil || !strings.Contains(err.Error(), "inbox: ") || !strings.Contains(err.Error(), busy.Error()) {
		t.Fatalf("Err() = %v, want the inbox and %v", err, busy)
	}
	release()

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go h.Watch(wctx, nil)
	waitFor(t, "the probe to clear the inbox", func() bool { return h.Err() == nil })
	if quiet := time.Since(refusedAt); quiet < store.Quiet {
		t.Fatalf("cleared %v after the refusal, before the path was quiet for %v", quiet, store.Quiet)
	}
}

// TestRefusedSQLite classifies SQLite's real errors: a full database, a busy lock, the write
// gate's timeout are refusals; a constraint, a syntax error and a cancelled write are not.
func TestRefusedSQLite(t *testing.T) {
	b := storetest.SQLite(t)
	db, err := store.Open(filepath.Join(b.Dir, "hermes.db"), store.Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)`); err != nil {
		t.Fatal(err)
	}

	// A full database: SQLite's own page limit on one connection stands for a full disk.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := conn.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `PRAGMA max_page_count = `+strconv.Itoa(pages+2)); err != nil {
		t.Fatal(err)
	}
	var full error
	for i := 0; full == nil && i < 100; i++ {
		_, full = conn.ExecContext(ctx, `INSERT INTO t (v) VALUES (zeroblob(8192))`)
	}
	conn.Close()
	var se *sqlite.Error
	if !errors.As(full, &se) || se.Code()&0xff != sqlite3.SQLITE_FULL {
		t.Fatalf("no SQLITE_FULL: %v", full)
	}

	// The write gate's timeout: a transaction of this process holds it.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	_, gate := db.Exec(`INSERT INTO t (v) VALUES (1)`)
	tx.Rollback()
	if !errors.Is(gate, store.ErrBusy) {
		t.Fatalf("no ErrBusy: %v", gate)
	}

	_, dup := db.Exec(`INSERT INTO t (id) VALUES (1), (1)`)
	_, syntax := db.Exec(`INSERT INTO nowhere VALUES (1)`)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, canceled := db.ExecContext(cctx, `INSERT INTO t (v) VALUES (1)`)
	dctx, cancel := context.WithTimeout(ctx, -time.Second)
	defer cancel()
	_, deadline := db.ExecContext(dctx, `INSERT INTO t (v) VALUES (1)`)

	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"full", full, true}, {"write gate busy", gate, true},
		{"constraint", dup, false}, {"no such table", syntax, false},
		{"cancelled", canceled, false}, {"deadline", deadline, false}, {"nil", nil, false},
	} {
		if c.name != "nil" && c.err == nil {
			t.Fatalf("%s: the write succeeded", c.name)
		}
		if got := store.Refused(c.err); got != c.want {
			t.Errorf("Refused(%s: %v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestRefusedPostgres classifies PostgreSQL's real errors: a read-only transaction (a standby)
// and a server that cannot be reached are refusals; a unique violation and a cancelled query
// are not.
func TestRefusedPostgres(t *testing.T) {
	b := storetest.Postgres(t)
	db := b.Open(t)
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE t (id BIGINT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t (id) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	_, dup := db.Exec(`INSERT INTO t (id) VALUES (1)`)
	var readOnly error
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_, readOnly = tx.Exec(`INSERT INTO t (id) VALUES (2)`)
	tx.Rollback()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, canceled := db.ExecContext(cctx, `INSERT INTO t (id) VALUES (3)`)
	gone, err := store.OpenPostgres(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", store.Options{})
	if err == nil {
		gone.Close()
		t.Fatal("connected to port 1")
	}
	var pe *pgconn.PgError
	if !errors.As(readOnly, &pe) || pe.Code != "25006" {
		t.Fatalf("not a read-only transaction error: %v", readOnly)
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"read-only", readOnly, true}, {"unreachable", err, true},
		{"unique", dup, false}, {"cancelled", canceled, false},
	} {
		if c.err == nil {
			t.Fatalf("%s: no error", c.name)
		}
		if got := store.Refused(c.err); got != c.want {
			t.Errorf("Refused(%s: %v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// BenchmarkProbe measures one probe write (what an idle host commits up to twice a second).
func BenchmarkProbe(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			be := storetest.SQLite(b)
			if name == "postgres" {
				be = storetest.Postgres(b)
			}
			db := be.Open(b)
			h := store.HealthOf(db)
			ctx := context.Background()
			for b.Loop() {
				h.ProbeOnce(ctx)
			}
			if err := h.Err(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
