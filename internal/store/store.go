// Package store opens the host's database and applies versioned migrations: SQLite
// (modernc.org/sqlite, pure Go, WAL) by default, or PostgreSQL (pgx) when several hosts share one
// database (postgres.go). Each host package owns its tables and its list of migrations, each in
// both dialects (dialect.go); store records which of them have run, and offers the unit of work
// the packages write together in (tx.go).
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Idle connections kept per database, and for how long. A writer holds its connection while it
// waits for the write gate, so a burst of deliveries over many chats has many open at once.
const (
	maxIdleConns    = 32
	connMaxIdleTime = time.Minute
)

// Options tune Open.
type Options struct {
	// BusyTimeout is how long a writer waits for the lock before SQLITE_BUSY. Default 5s.
	BusyTimeout time.Duration
	// NoWriteGate leaves the queueing of this process's writers to SQLite's busy handler, as
	// without the write gate (gate.go). For measuring the gate only.
	NoWriteGate bool
	// MaxConns caps a PostgreSQL pool (default postgresMaxConns). SQLite ignores it.
	MaxConns int
}

// OpenSource opens the database a configuration names: "" for SQLite at
// <dataDir>/hermes.db, or a postgres:// URL.
func OpenSource(ctx context.Context, source, dataDir string, opt Options) (*sql.DB, error) {
	switch {
	case source == "" || source == "sqlite":
		return Open(filepath.Join(dataDir, "hermes.db"), opt)
	case IsPostgres(source):
		return OpenPostgres(ctx, source, opt)
	}
	return nil, fmt.Errorf("store: %q is neither empty (SQLite in the data directory) nor a postgres:// URL", Redact(source))
}

// Open opens (creating if needed) the database at path with WAL journaling, foreign keys on and
// a busy timeout. The database file is readable by its owner only (mode 0600; SQLite gives its
// -wal and -shm files the same mode), and a looser existing file is narrowed. Use ":memory:"
// only for throwaway tests: each connection would get its own database, so Open limits such a
// DB to one connection.
func Open(path string, opt Options) (*sql.DB, error) {
	if opt.BusyTimeout == 0 {
		opt.BusyTimeout = 5 * time.Second
	}
	if path != ":memory:" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("store: create data directory: %w", err)
		}
		if err := private(path); err != nil {
			return nil, err
		}
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opt.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_txlock", "immediate")
	// The path goes into a file: URI, where '%', '?' and '#' would be read as an escape, the
	// query and a fragment: a test's temporary directory "…#00/…" opened another, shared file.
	dsn := "file:" + strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path) + "?" + q.Encode()
	base, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	var conn driver.Connector = base
	if !opt.NoWriteGate {
		conn = gatedConnector{Connector: base, gate: &gate{ch: make(chan struct{}, 1), timeout: opt.BusyTimeout}}
	}
	health := newHealth()
	db := sql.OpenDB(sqliteConnector{Connector: conn, drv: &sqliteDriver{Driver: base.Driver(), h: health}})
	health.db = db
	if path == ":memory:" {
		db.SetMaxOpenConns(1)
	} else {
		// Keep a burst's connections open for a while. With database/sql's default of two
		// idle connections, concurrent writers queued on the gate each opened a connection
		// (running the pragmas above and preparing its statements again) and closed it after
		// one statement: 0.74 connections opened per guarded delivery at 64 chats.
		db.SetMaxIdleConns(maxIdleConns)
		db.SetConnMaxIdleTime(connMaxIdleTime)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
		component TEXT NOT NULL,
		version   INTEGER NOT NULL,
		applied_at INTEGER NOT NULL,
		PRIMARY KEY (component, version))`); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: create schema_migrations: %w", err)
	}
	if _, err := db.Exec(createProbe); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: create store_probe: %w", err)
	}
	if _, err := db.Exec(createWithdrawals); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: create store_withdrawals: %w", err)
	}
	return db, nil
}

// createProbe creates the table of Health's probe write (health.go): one row.
const createProbe = `CREATE TABLE IF NOT EXISTS store_probe (id INTEGER PRIMARY KEY, at BIGINT NOT NULL)`

// sqliteConnector is the connector of a SQLite database opened by Open: its Driver carries the
// database's write health (HealthOf).
type sqliteConnector struct {
	driver.Connector
	drv *sqliteDriver
}

func (c sqliteConnector) Driver() driver.Driver { return c.drv }

// sqliteDriver is modernc's driver and the write health of one database.
type sqliteDriver struct {
	driver.Driver
	h *Health
}

func (d *sqliteDriver) health() *Health { return d.h }

// private creates the database file with mode 0600 if it does not exist, and narrows the modes
// of an existing one and its -wal and -shm files to 0600.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, 0o600); err != nil {
				return fmt.Errorf("store: narrowing the mode of %s: %w", p, err)
			}
		}
	}
	return nil
}

// Migrate applies, in order and each in its own transaction, the migrations of component that
// have not run yet, each in db's dialect (Migration). Migration i (0-based) is version i+1.
// Migrations are append-only: never edit or reorder a released one.
//
// On PostgreSQL migrations run under an advisory lock, so hosts starting together apply each
// once.
func Migrate(ctx context.Context, db *sql.DB, component string, migrations []Migration) error {
	if dialectOf(db) == postgresDialect {
		return withMigrationLock(ctx, db, func() error { return migrate(ctx, db, component, migrations) })
	}
	return migrate(ctx, db, component, migrations)
}

// migrateWait bounds how long a migration waits out a database another process holds locked
// (a backup, another host's long write on the same SQLite file, a stuck tool). Past it, start-up
// fails and says so; within it, a host started beside a long write starts late, not never.
const migrateWait = time.Minute

// testHookMigrateBusy, when set by a test, is called each time a migration found the database
// locked and is about to try again.
var testHookMigrateBusy func()

func migrate(ctx context.Context, db *sql.DB, component string, migrations []Migration) error {
	for i, m := range migrations {
		version := i + 1
		err := migrateOne(ctx, db, component, version, m.For(db))
		if err != nil {
			return fmt.Errorf("store: migrate %s to version %d: %w", component, version, err)
		}
	}
	return nil
}

// migrateOne applies one migration unless it was applied, trying again while another writer
// holds the database locked (for at most migrateWait).
func migrateOne(ctx context.Context, db *sql.DB, component string, version int, stmt string) error {
	start := time.Now()
	for {
		err := migrateTx(ctx, db, component, version, stmt)
		if err == nil || !locked(err) || time.Since(start) >= migrateWait {
			return err
		}
		if testHookMigrateBusy != nil {
			testHookMigrateBusy()
		}
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// locked reports whether err says another writer held the database (SQLITE_BUSY or
// SQLITE_LOCKED, or the write gate's ErrBusy): a condition that passes, unlike a full disk.
func locked(err error) bool {
	if errors.Is(err, ErrBusy) {
		return true
	}
	code, ok := sqliteCode(err)
	return ok && (code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED)
}

// migrateTx applies one migration in one transaction unless schema_migrations says it was.
func migrateTx(ctx context.Context, db *sql.DB, component string, version int, stmt string) error {
	return WithTx(ctx, db, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx,
			`SELECT COUNT(*) FROM schema_migrations WHERE component = $1 AND version = $2`,
			component, version).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO schema_migrations (component, version, applied_at) VALUES ($1, $2, $3)`,
			component, version, time.Now().UnixMilli())
		return err
	})
}

// WithTx runs fn in a transaction, committing if fn returns nil and rolling back otherwise. On
// SQLite it is BEGIN IMMEDIATE, so writers queue on the write gate instead of failing at commit.
// On PostgreSQL it is SERIALIZABLE, and a transaction PostgreSQL aborts as a serialization
// failure or deadlock is run again from the start (up to txAttempts times): fn must not have
// effects outside the transaction that a second run would repeat.
func WithTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	if dialectOf(db) != postgresDialect {
		return withTx(ctx, db, nil, fn)
	}
	var err error
	for attempt := 0; attempt < txAttempts; attempt++ {
		if attempt > 0 {
			// Back off a little, growing and jittered, so the transactions that collided do
			// not collide again.
			d := time.Duration(attempt*attempt)*time.Millisecond + time.Duration(time.Now().UnixNano()%int64(time.Millisecond))
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			}
		}
		err = withTx(ctx, db, &sql.TxOptions{Isolation: sql.LevelSerializable}, fn)
		if err == nil || !retryable(err) {
			return err
		}
		retries.Add(1)
	}
	return fmt.Errorf("store: transaction still conflicting after %d attempts: %w", txAttempts, err)
}

// retries counts the transactions WithTx ran again after PostgreSQL aborted them.
var retries atomic.Int64

// Retries returns how many transactions this process ran again after PostgreSQL aborted them as
// serialization failures or deadlocks; benchmarks divide its growth by the work done.
func Retries() int64 { return retries.Load() }

// txAttempts bounds WithTx's runs of one transaction on PostgreSQL.
const txAttempts = 20

func withTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
		if err != nil {
			if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ErrNoDatabase is OpenReader's error when the configuration names a database that does not
// exist (a SQLite file never created, a PostgreSQL database no host has set up).
var ErrNoDatabase = errors.New("no database")

// OpenReader opens the database a configuration names (as OpenSource) for reading only, for the
// commands that inspect it beside a serving host: it creates nothing (no file, no directory, no
// table) and migrates nothing, and a database that is not there is ErrNoDatabase (wrapped, with
// where it was looked for). Writes through the returned DB fail.
func OpenReader(ctx context.Context, source, dataDir string) (*sql.DB, error) {
	switch {
	case source == "" || source == "sqlite":
		return openSQLiteReader(filepath.Join(dataDir, "hermes.db"), true)
	case IsPostgres(source):
		return openPostgresReader(ctx, source)
	}
	return nil, fmt.Errorf("store: %q is neither empty (SQLite in the data directory) nor a postgres:// URL", Redact(source))
}

// OpenBackupSource opens the SQLite store in dataDir for Backup: like OpenReader it creates and
// migrates nothing (ErrNoDatabase where there is none), but its connections are not query_only,
// which SQLite's VACUUM INTO refuses. Backup only reads the store through it.
func OpenBackupSource(dataDir string) (*sql.DB, error) {
	return openSQLiteReader(filepath.Join(dataDir, "hermes.db"), false)
}

// openSQLiteReader opens the SQLite file at path without creating it, query_only when
// queryOnly (on a read-write connection, so the reader can share the WAL index of a serving
// host; SQLite's own -wal and -shm files are the only files it may create, beside an existing
// database).
func openSQLiteReader(path string, queryOnly bool) (*sql.DB, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w at %s", ErrNoDatabase, path)
	case err != nil:
		return nil, fmt.Errorf("store: %w", err)
	case fi.IsDir():
		return nil, fmt.Errorf("store: %s is a directory, not a database", path)
	}
	q := url.Values{}
	q.Add("mode", "rw") // never create
	q.Add("_pragma", "busy_timeout(5000)")
	if queryOnly {
		q.Add("_pragma", "query_only(1)")
	}
	dsn := "file:" + strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path) + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	var n int
	// A file that is not a database, or one no host has set up, says so here.
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if n == 0 {
		db.Close()
		return nil, fmt.Errorf("%w at %s: the file has no hermes-host tables", ErrNoDatabase, path)
	}
	return db, nil
}
