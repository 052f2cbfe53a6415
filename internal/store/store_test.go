package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestMigrateAppliesOnceAndInOrder(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	migs := []string{
		`CREATE TABLE a (x INTEGER)`,
		`ALTER TABLE a ADD COLUMN y TEXT`,
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
	migs = append(migs, `INSERT INTO a (x, y) VALUES (1, 'one')`)
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

func TestMigrateFailureRollsBack(t *testing.T) {
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "h.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = Migrate(ctx, db, "bad", []string{`CREATE TABLE ok (x)`, `THIS IS NOT SQL`})
	if err == nil {
		t.Fatal("want an error for a broken migration")
	}
	var n int
	db.QueryRow(`SELECT COUNT(*) FROM schema_migrations WHERE component = 'bad'`).Scan(&n)
	if n != 1 {
		t.Fatalf("recorded %d migrations, want 1 (the good one)", n)
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
