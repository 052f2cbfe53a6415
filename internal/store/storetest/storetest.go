// Package storetest gives tests a database on each backend the host supports: SQLite in a
// temporary directory, and PostgreSQL in a database of its own on the server named by
// HERMES_TEST_POSTGRES (scripts/with-postgres starts a temporary one; `make test` uses it).
//
// Without HERMES_TEST_POSTGRES the PostgreSQL runs are skipped, unless HERMES_REQUIRE_TOOLS is
// set, when they fail: `make test` must not pass by skipping them.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// Env names the variable holding the PostgreSQL server's address for tests.
const Env = "HERMES_TEST_POSTGRES"

// Backend is one store backend for a test.
type Backend struct {
	Name string // "sqlite" or "postgres"
	// Source is what store.OpenSource takes: "" (SQLite in the data directory) or a postgres:// URL
	// of a database created for this test.
	Source string
	// Dir is a data directory for the test (SQLite's database lives in it).
	Dir string
}

// Open opens the backend's database and closes it when the test ends.
func (b Backend) Open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := store.OpenSource(context.Background(), b.Source, b.Dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Each runs fn as a subtest on SQLite and on PostgreSQL.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, Postgres(t)) })
}

// SQLite returns a SQLite backend in a temporary directory.
func SQLite(t testing.TB) Backend {
	return Backend{Name: "sqlite", Dir: t.TempDir()}
}

var seq atomic.Int64

// Postgres returns a PostgreSQL backend: a database created for this test on the server named by
// HERMES_TEST_POSTGRES and dropped when it ends.
func Postgres(t testing.TB) Backend {
	t.Helper()
	admin := os.Getenv(Env)
	if admin == "" {
		if os.Getenv("HERMES_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s is not set: run the tests through scripts/with-postgres (make test does)", Env)
		}
		t.Skipf("%s is not set: run through scripts/with-postgres to test on PostgreSQL", Env)
	}
	name := fmt.Sprintf("hermes_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, seq.Add(1))
	ctx := context.Background()
	db, err := store.OpenPostgres(ctx, admin, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		db, err := store.OpenPostgres(ctx, admin, store.Options{MaxConns: 2})
		if err != nil {
			t.Logf("drop test database %s: %v", name, err)
			return
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return Backend{Name: "postgres", Source: u.String(), Dir: t.TempDir()}
}

// StoreEnv names the variable choosing the backend of Default: "postgres", or SQLite when unset.
const StoreEnv = "HERMES_TEST_STORE"

// Default returns the backend a package's ordinary tests use: SQLite, or PostgreSQL when
// HERMES_TEST_STORE=postgres, so that a whole package's tests can be run on PostgreSQL by hand
// (`HERMES_TEST_STORE=postgres scripts/with-postgres go test ./internal/delivery`).
func Default(t testing.TB) Backend {
	if os.Getenv(StoreEnv) == "postgres" {
		return Postgres(t)
	}
	return SQLite(t)
}

// Fresh returns a new, empty backend of b's kind, for a subtest that needs a database of its own.
func (b Backend) Fresh(t testing.TB) Backend {
	if b.Name == "postgres" {
		return Postgres(t)
	}
	return SQLite(t)
}
