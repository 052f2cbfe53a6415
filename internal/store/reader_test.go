package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// OpenReader never creates a database: where there is none it says so (ErrNoDatabase) and
// leaves the data directory as it was (here: not there at all).
func TestOpenReaderCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	_, err := store.OpenReader(context.Background(), "", dir)
	if !errors.Is(err, store.ErrNoDatabase) {
		t.Fatalf("no database: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the reader created the data directory: %v", err)
	}
	// A file that is not hermes-host's database is not taken for one, and is left unchanged.
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "hermes.db"), nil, 0o600)
	if _, err := store.OpenReader(context.Background(), "", dir); !errors.Is(err, store.ErrNoDatabase) {
		t.Fatalf("an empty file: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "hermes.db")); fi.Size() != 0 {
		t.Fatalf("the reader wrote to an empty file: %d bytes", fi.Size())
	}
}

// A reader reads what a host wrote, beside it, and cannot write; it migrates nothing.
func TestOpenReaderReadsAndCannotWrite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		if _, err := store.OpenReader(ctx, b.Source, b.Dir); !errors.Is(err, store.ErrNoDatabase) {
			t.Fatalf("before any host: %v", err)
		}
		w := b.Open(t)
		if err := store.Migrate(ctx, w, "readertest", []store.Migration{store.Same(`CREATE TABLE readertest (v TEXT)`)}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Exec(`INSERT INTO readertest (v) VALUES ('hello')`); err != nil {
			t.Fatal(err)
		}
		r, err := store.OpenReader(ctx, b.Source, b.Dir)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var v string
		if err := r.QueryRow(`SELECT v FROM readertest`).Scan(&v); err != nil || v != "hello" {
			t.Fatalf("read %q, %v", v, err)
		}
		if _, err := r.Exec(`INSERT INTO readertest (v) VALUES ('no')`); err == nil {
			t.Fatal("a reader wrote")
		}
		if err := store.Migrate(ctx, r, "readertest2", []store.Migration{store.Same(`CREATE TABLE readertest2 (v TEXT)`)}); err == nil {
			t.Fatal("a reader migrated")
		}
		if store.Shared(r) != (b.Name == "postgres") {
			t.Fatalf("%s reader: Shared %v", b.Name, store.Shared(r))
		}
	})
}
