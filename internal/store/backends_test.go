package store_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// The store suite: what every host package relies on, on both backends.

func TestBackendMigrateOnceAndInOrder(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		migs := []string{
			`CREATE TABLE a (x INTEGER NOT NULL, big INTEGER, data BLOB)`,
			`ALTER TABLE a ADD COLUMN y TEXT`,
		}
		for range 2 { // the second run must not apply again (ALTER would fail)
			if err := store.Migrate(ctx, db, "test", migs); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		db = b.Open(t)
		migs = append(migs, `INSERT INTO a (x, big, y) VALUES (1, 1700000000000, 'one')`)
		if err := store.Migrate(ctx, db, "test", migs); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `UPDATE a SET data = ? WHERE x = 1`, []byte{0, 0xff}); err != nil {
			t.Fatal(err)
		}
		var (
			y    string
			big  int64
			data []byte
		)
		// INTEGER holds 64 bits on both (unix milliseconds do not fit 32).
		if err := db.QueryRow(`SELECT y, big, data FROM a WHERE x = ?`, 1).Scan(&y, &big, &data); err != nil || y != "one" || big != 1700000000000 || string(data) != "\x00\xff" {
			t.Fatalf("got %q %d %x, %v", y, big, data, err)
		}
		var n int
		db.QueryRow(`SELECT COUNT(*) FROM schema_migrations WHERE component = 'test'`).Scan(&n)
		if n != 3 {
			t.Fatalf("recorded %d migrations, want 3", n)
		}
	})
}

func TestBackendMigrateFailureRollsBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		err := store.Migrate(ctx, db, "bad", []string{`CREATE TABLE ok (x INTEGER)`, `THIS IS NOT SQL`})
		if err == nil {
			t.Fatal("want an error for a broken migration")
		}
		var n int
		db.QueryRow(`SELECT COUNT(*) FROM schema_migrations WHERE component = 'bad'`).Scan(&n)
		if n != 1 {
			t.Fatalf("recorded %d migrations, want 1 (the good one)", n)
		}
	})
}

// The SQL the host packages write, once, in SQLite's dialect: placeholders, upserts, RETURNING,
// the implicit rowid's insertion order, and identity columns.
func TestBackendPortableSQL(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		err := store.Migrate(ctx, db, "sql", []string{`
			CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;
			CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, msg TEXT NOT NULL);
			CREATE TABLE q (id TEXT PRIMARY KEY, state TEXT NOT NULL);`})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"a", "b"} {
			if _, err := db.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, "k", v); err != nil {
				t.Fatal(err)
			}
		}
		res, err := db.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT DO NOTHING`, "k", "c")
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 0 {
			t.Fatalf("ignored insert affected %d rows", n)
		}
		var v string
		// A '?' inside a literal is not a placeholder.
		if err := db.QueryRow(`SELECT v || '?' FROM kv WHERE k = ?`, "k").Scan(&v); err != nil || v != "b?" {
			t.Fatalf("got %q, %v", v, err)
		}
		var seq1, seq2 int64
		db.QueryRow(`INSERT INTO log (msg) VALUES (?) RETURNING seq`, "one").Scan(&seq1)
		db.QueryRow(`INSERT INTO log (msg) VALUES (?) RETURNING seq`, "two").Scan(&seq2)
		if seq1 == 0 || seq2 <= seq1 {
			t.Fatalf("seq %d then %d", seq1, seq2)
		}
		for _, id := range []string{"z", "a", "m"} {
			db.ExecContext(ctx, `INSERT INTO q (id, state) VALUES (?, 'pending')`, id)
		}
		rows, err := db.QueryContext(ctx, `SELECT id FROM q ORDER BY rowid`)
		if err != nil {
			t.Fatal(err)
		}
		var order string
		for rows.Next() {
			var id string
			rows.Scan(&id)
			order += id
		}
		rows.Close()
		if order != "zam" {
			t.Fatalf("rowid order %q, want insertion order zam", order)
		}
	})
}

// Read-modify-write transactions from many goroutines lose no update: SQLite queues them, and
// PostgreSQL's serialization failures are retried by WithTx.
func TestBackendTransactionsSerialize(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		if err := store.Migrate(ctx, db, "c", []string{`CREATE TABLE c (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); INSERT INTO c VALUES (1, 0);`}); err != nil {
			t.Fatal(err)
		}
		const workers, each = 8, 20
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for range each {
					err := store.WithTx(ctx, db, func(tx *sql.Tx) error {
						var n int
						if err := tx.QueryRowContext(ctx, `SELECT n FROM c WHERE id = 1`).Scan(&n); err != nil {
							return err
						}
						_, err := tx.ExecContext(ctx, `UPDATE c SET n = ? WHERE id = 1`, n+1)
						return err
					})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var n int
		db.QueryRow(`SELECT n FROM c WHERE id = 1`).Scan(&n)
		if n != workers*each {
			t.Fatalf("counter %d, want %d", n, workers*each)
		}
	})
}

// A failing fn rolls back and its error comes back unchanged.
func TestBackendTxRollsBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		store.Migrate(ctx, db, "r", []string{`CREATE TABLE r (x INTEGER)`})
		boom := errors.New("boom")
		err := store.WithTx(ctx, db, func(tx *sql.Tx) error {
			tx.ExecContext(ctx, `INSERT INTO r VALUES (1)`)
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		var n int
		db.QueryRow(`SELECT COUNT(*) FROM r`).Scan(&n)
		if n != 0 {
			t.Fatalf("%d rows after rollback", n)
		}
	})
}

// Hosts starting together on one PostgreSQL apply each migration once.
func TestPostgresConcurrentMigrate(t *testing.T) {
	b := storetest.Postgres(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			db, err := store.OpenSource(ctx, b.Source, b.Dir, store.Options{MaxConns: 4})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			errs <- store.Migrate(ctx, db, "m", []string{`CREATE TABLE m (x INTEGER)`, `ALTER TABLE m ADD COLUMN y TEXT`})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A NUL character in text: SQLite keeps it; PostgreSQL's text cannot hold it, so the store puts
// U+FFFD in its place instead of refusing the statement (and, with it, the chat's message).
func TestBackendNULInText(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		if err := store.Migrate(ctx, db, "nul", []string{`CREATE TABLE n (id INTEGER PRIMARY KEY, v TEXT NOT NULL, raw BLOB)`}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO n (id, v, raw) VALUES (?, ?, ?)`, 1, "a\x00b", []byte("a\x00b")); err != nil {
			t.Fatal(err)
		}
		st, err := db.PrepareContext(ctx, `INSERT INTO n (id, v) VALUES (?, ?)`)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.ExecContext(ctx, 2, "c\x00d"); err != nil {
			t.Fatal(err)
		}
		want := map[int]string{1: "a\x00b", 2: "c\x00d"}
		if b.Name == "postgres" {
			want = map[int]string{1: "a\uFFFDb", 2: "c\uFFFDd"}
		}
		for id, w := range want {
			var v string
			if err := db.QueryRow(`SELECT v FROM n WHERE id = ?`, id).Scan(&v); err != nil || v != w {
				t.Errorf("row %d: %q, %v; want %q", id, v, err, w)
			}
		}
		var raw []byte
		if err := db.QueryRow(`SELECT raw FROM n WHERE id = 1`).Scan(&raw); err != nil || string(raw) != "a\x00b" {
			t.Errorf("bytes: %q, %v", raw, err)
		}
	})
}
