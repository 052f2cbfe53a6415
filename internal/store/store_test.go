package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMigrateAppliesOnceAndInOrder(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	migs := []Migration{
		Same(`CREATE TABLE a (x INTEGER)`),
		Same(`ALTER TABLE a ADD COLUMN y TEXT`),
	}
	if err := Migrate(ctx, db, "test", migs); err != nil {
		t.Fatal(err)
	}
	// Running again must not re-apply (ALTER would fail on a duplicate column).
	if err := Migrate(ctx, db, "test", migs); err != nil {
		t.Fatalf("second run: %v", err)
	}
	db.Close()

	// A new version added later is applied on reopen; the old ones are not.
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migs = append(migs, Same(`INSERT INTO a (x, y) VALUES (1, 'one')`))
	if err := Migrate(ctx, db, "test", migs); err != nil {
		t.Fatal(err)
	}
	var y string
	if err := db.QueryRow(`SELECT y FROM a WHERE x = 1`).Scan(&y); err != nil || y != "one" {
		t.Fatalf("got %q, %v", y, err)
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
}

// A path with characters that mean something in a file: URI opens exactly that file, with the
// options applied (a subtest named "" gets a temporary directory "…#00").
func TestOpenPathWithURICharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a#00", "b?c", "d%20e")
	path := filepath.Join(dir, "h.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (x)`); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database is not at %s: %v", path, err)
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q %v: the options were lost", mode, err)
	}
}

// TestFilesArePrivate: the database and its WAL files are readable by their owner only, and an
// existing file with a looser mode is narrowed.
func TestFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "hermes.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE t (x)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	os.Chmod(path, 0o644)
	if db, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.Exec(`INSERT INTO t VALUES (1)`)
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", p, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(filepath.Dir(path)); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v", fi.Mode().Perm())
	}
}

// BenchmarkConcurrentWriters measures writes per second with 16 goroutines writing at once
// (small transactions and single statements, as the ledger, the turns and the registry do),
// through the write gate and, as the baseline in the same run, through SQLite's busy handler
// alone. It also reports the slowest single write.
func BenchmarkConcurrentWriters(b *testing.B) {
	for _, gated := range []bool{true, false} {
		name := "gate"
		if !gated {
			name = "busy-handler"
		}
		b.Run(name, func(b *testing.B) {
			db, err := Open(filepath.Join(b.TempDir(), "h.db"), Options{NoWriteGate: !gated})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)`); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var worst atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					start := time.Now()
					var err error
					if i%2 == 0 {
						err = WithTx(ctx, db, func(tx *sql.Tx) error {
							_, err := tx.Exec(`INSERT INTO t (v) VALUES ('x')`)
							if err == nil {
								_, err = tx.Exec(`UPDATE t SET v = 'y' WHERE id = last_insert_rowid()`)
							}
							return err
						})
					} else {
						_, err = db.Exec(`INSERT INTO t (v) VALUES ('z')`)
					}
					if err != nil {
						b.Error(err)
						return
					}
					if d := int64(time.Since(start)); d > worst.Load() {
						worst.Store(d)
					}
				}
			})
			b.ReportMetric(float64(time.Duration(worst.Load()).Milliseconds()), "worst-ms")
		})
	}
}

// TestBurstKeepsConnections runs 16 writers at once, repeatedly: every connection the burst
// opened stays open for the next round instead of being closed after one statement and opened
// again (database/sql keeps two idle connections unless told otherwise).
func TestBurstKeepsConnections(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "h.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	const writers = 16
	for round := 0; round < 5; round++ {
		errs := make(chan error, writers)
		for w := 0; w < writers; w++ {
			go func() {
				_, err := db.Exec(`INSERT INTO t (x) VALUES ($1)`, w)
				errs <- err
			}()
		}
		for w := 0; w < writers; w++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := db.Stats(); st.MaxIdleClosed != 0 {
		t.Fatalf("%d connections were closed for lack of idle room (%d open)", st.MaxIdleClosed, st.OpenConnections)
	}
}

// BenchmarkPlaceholders measures what writing queries once with $N placeholders costs SQLite
// against its own ?: modernc.org/sqlite reads each $N parameter's name to bind it (one small
// allocation per argument), where a ? has none. The statement is a prepared query of 24
// arguments (as many as the ledger's insert) that touches no table, so the binding is all there
// is to measure; a write's commit costs a hundred times more. The same run measures both.
func BenchmarkPlaceholders(b *testing.B) {
	const n = 24
	for _, style := range []string{"question", "dollar"} {
		b.Run(style, func(b *testing.B) {
			db, err := Open(filepath.Join(b.TempDir(), "h.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ps := make([]string, n)
			for i := range ps {
				ps[i] = "?"
				if style == "dollar" {
					ps[i] = fmt.Sprintf("$%d", i+1)
				}
			}
			st, err := db.Prepare(`SELECT ` + strings.Join(ps, " + "))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			args := make([]any, n)
			for i := range args {
				args[i] = int64(i)
			}
			b.ReportAllocs()
			for b.Loop() {
				var sum int64
				if err := st.QueryRow(args...).Scan(&sum); err != nil || sum != n*(n-1)/2 {
					b.Fatal(sum, err)
				}
			}
		})
	}
}

// A host started while another process holds the SQLite file locked (the promise checker's
// store fault: another writer on the file) waits the lock out instead of failing to start:
// the migration finds the database locked, tries again, and applies once the lock is gone.
func TestMigrateWaitsOutALockedDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	holder, err := Open(path, Options{BusyTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := Migrate(ctx, holder, "init", []Migration{Same(`CREATE TABLE x (a INTEGER)`)}); err != nil {
		t.Fatal(err)
	}
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	// The starting host is another process in life; here another pool on the same file, with
	// the write gate out of the way so the lock reaches it as SQLite's SQLITE_BUSY.
	db, err := Open(path, Options{BusyTimeout: 20 * time.Millisecond, NoWriteGate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	busy := make(chan struct{}, 1)
	testHookMigrateBusy = func() {
		select {
		case busy <- struct{}{}:
		default:
		}
	}
	defer func() { testHookMigrateBusy = nil }()
	done := make(chan error, 1)
	go func() { done <- Migrate(ctx, db, "late", []Migration{Same(`CREATE TABLE y (b INTEGER)`)}) }()
	select {
	case <-busy: // it met the lock and waits
	case err := <-done:
		t.Fatalf("the migration ended while the database was locked: %v", err)
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the migration failed once the lock was gone: %v", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO y (b) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
}
