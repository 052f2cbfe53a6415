package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// openOne opens a SQLite store with a single connection, so every statement meets the same cache.
func openOne(t *testing.T) *sql.DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "c.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL UNIQUE)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// cachedCount reads how many statements the connection keeps.
func cachedCount(t *testing.T, db *sql.DB) int {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := -1
	c.Raw(func(dc any) error {
		n = len(dc.(*gatedConn).stmts)
		return nil
	})
	return n
}

// A statement run again is not prepared again, whether executed or queried, in a transaction or not.
func TestStatementCacheReuses(t *testing.T) {
	db := openOne(t)
	before := Prepares()
	for i := range 50 {
		if _, err := db.Exec(`INSERT INTO t (v) VALUES (?)`, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := db.QueryRow(`SELECT v FROM t WHERE id = ?`, i+1).Scan(&v); err != nil || v != fmt.Sprint("v", i) {
			t.Fatalf("row %d: %q %v", i+1, v, err)
		}
		err := WithTx(context.Background(), db, func(tx *sql.Tx) error {
			_, err := tx.Exec(`UPDATE t SET v = v || '' WHERE id = ?`, i+1)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := Prepares() - before; n != 3 {
		t.Fatalf("%d statements prepared for 3 queries run 50 times each", n)
	}
}

// The same query run while rows of it are still open (inside the loop that reads them) takes the
// uncached path; both give the right rows, and the statement is cached again afterwards.
func TestStatementCacheQueryInsideItsOwnRows(t *testing.T) {
	db := openOne(t)
	for i := range 5 {
		db.Exec(`INSERT INTO t (v) VALUES (?)`, fmt.Sprint("v", i))
	}
	const q = `SELECT id, v FROM t WHERE id >= ? ORDER BY id`
	err := WithTx(context.Background(), db, func(tx *sql.Tx) error {
		rows, err := tx.Query(q, 1)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var id int
			var v string
			if err := rows.Scan(&id, &v); err != nil {
				return err
			}
			n++
			var innerID int
			var innerV string
			if err := tx.QueryRow(q, id).Scan(&innerID, &innerV); err != nil || innerID != id || innerV != v {
				return fmt.Errorf("inner query at %d: %d %q %v", id, innerID, innerV, err)
			}
		}
		if n != 5 {
			return fmt.Errorf("outer loop read %d rows, want 5", n)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	before := Prepares()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM (`+q+`)`, 1).Scan(&n); err != nil || n != 5 {
		t.Fatal(n, err)
	}
	rows, _ := db.Query(q, 1)
	rows.Close()
	if Prepares()-before != 1 {
		t.Fatalf("the freed statement was prepared again (%d prepares)", Prepares()-before)
	}
}

// A failed statement (a constraint) leaves its cached statement usable; a schema change under a
// cached statement is picked up; scripts run every statement and are not cached.
func TestStatementCacheAfterErrorsAndSchemaChanges(t *testing.T) {
	db := openOne(t)
	const ins = `INSERT INTO t (v) VALUES (?)`
	if _, err := db.Exec(ins, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ins, "a"); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Fatalf("duplicate insert: %v", err)
	}
	if _, err := db.Exec(ins, "b"); err != nil {
		t.Fatalf("the cached insert after its failure: %v", err)
	}
	const sel = `SELECT * FROM t WHERE v = ?`
	var id int
	var v string
	if err := db.QueryRow(sel, "b").Scan(&id, &v); err != nil || v != "b" {
		t.Fatal(id, v, err)
	}
	// The table changes shape under the cached SELECT *: SQLite prepares it again.
	if _, err := db.Exec(`ALTER TABLE t ADD COLUMN w TEXT NOT NULL DEFAULT 'w'`); err != nil {
		t.Fatal(err)
	}
	var w string
	if err := db.QueryRow(sel, "b").Scan(&id, &v, &w); err != nil || w != "w" {
		t.Fatalf("after ALTER TABLE: %q %v", w, err)
	}
	before := cachedCount(t, db)
	if _, err := db.Exec(`INSERT INTO t (v) VALUES ('c'); INSERT INTO t (v) VALUES ('d');`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("after a script of two inserts: %d rows, %v", n, err)
	}
	if got := cachedCount(t, db); got != before+1 {
		t.Fatalf("cached statements %d → %d: the script was cached (or COUNT was not)", before, got)
	}
}

// A connection keeps at most maxCachedStmts statements, and every query still answers.
func TestStatementCacheIsBounded(t *testing.T) {
	db := openOne(t)
	for i := range maxCachedStmts + 40 {
		var n int
		if err := db.QueryRow(fmt.Sprintf(`SELECT %d + COUNT(*) FROM t`, i)).Scan(&n); err != nil || n != i {
			t.Fatalf("query %d: %d %v", i, n, err)
		}
	}
	if n := cachedCount(t, db); n > maxCachedStmts {
		t.Fatalf("%d statements cached, at most %d", n, maxCachedStmts)
	}
}
