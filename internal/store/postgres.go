package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// IsPostgres reports whether source is a PostgreSQL address (postgres:// or postgresql://).
func IsPostgres(source string) bool {
	return strings.HasPrefix(source, "postgres://") || strings.HasPrefix(source, "postgresql://")
}

// Redact returns source with the password of a URL (or of a key=value connection string)
// replaced, for logs and error messages.
func Redact(source string) string {
	if u, err := url.Parse(source); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
		return source
	}
	if cfg, err := pgx.ParseConfig(source); err == nil && cfg.Password != "" {
		return strings.ReplaceAll(source, cfg.Password, "xxxxx")
	}
	return source
}

// Postgres pool size: every held boundary lock (one per chat being worked on) keeps a
// connection in a transaction, so the pool is sized for the chats of a burst plus the writers.
const postgresMaxConns = 96

// OpenPostgres opens the PostgreSQL database at the URL dsn through pgx (database/sql). Queries
// are written once, with $1, $2, … placeholders, which both SQLite and PostgreSQL read; the
// connection passes them on unchanged (see dialect.go for what differs). Transactions run at
// SERIALIZABLE isolation and WithTx retries one that PostgreSQL aborted as a serialization
// failure, so every transaction sees what it would see if transactions ran one at a time, as
// SQLite's single writer gives.
func OpenPostgres(ctx context.Context, dsn string, opt Options) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: postgres address %s: %w", Redact(dsn), err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	base := stdlib.GetConnector(*cfg)
	health := newHealth()
	db := sql.OpenDB(pgConnector{base: base, drv: &pgDriver{base: base.Driver(), h: health}})
	health.db = db
	max := opt.MaxConns
	if max == 0 {
		max = postgresMaxConns
	}
	db.SetMaxOpenConns(max)
	db.SetMaxIdleConns(min(max, maxIdleConns))
	db.SetConnMaxIdleTime(connMaxIdleTime)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", Redact(dsn), err)
	}
	// Several hosts may start at once: create the bookkeeping table under the migration lock.
	err = withMigrationLock(ctx, db, func() error {
		_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			component TEXT NOT NULL,
			version   BIGINT NOT NULL,
			applied_at BIGINT NOT NULL,
			PRIMARY KEY (component, version))`)
		if err != nil {
			return err
		}
		if _, err = db.ExecContext(ctx, createProbe); err != nil {
			return err
		}
		_, err = db.ExecContext(ctx, createWithdrawals)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: create schema_migrations, store_probe and store_withdrawals: %w", err)
	}
	return db, nil
}

// openPostgresReader opens the PostgreSQL database at dsn for reading: every transaction is
// read-only, and nothing is created; a database without hermes-host's tables is ErrNoDatabase.
func openPostgresReader(ctx context.Context, dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: postgres address %s: %w", Redact(dsn), err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	base := stdlib.GetConnector(*cfg)
	db := sql.OpenDB(pgConnector{base: base, drv: &pgDriver{base: base.Driver(), h: newHealth()}})
	db.SetMaxOpenConns(4)
	var found sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('schema_migrations')::text`).Scan(&found); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", Redact(dsn), err)
	}
	if !found.Valid {
		db.Close()
		return nil, fmt.Errorf("%w at %s: no host has set this database up", ErrNoDatabase, Redact(dsn))
	}
	return db, nil
}

// withMigrationLock runs fn holding a session-level advisory lock on a connection of its own,
// so that hosts starting together on one PostgreSQL apply each migration once. The lock is held
// outside fn's transactions: a SERIALIZABLE transaction's snapshot is taken at its first
// statement, so taking the lock inside it would leave it blind to the migration that the host
// it waited for has just committed.
func withMigrationLock(ctx context.Context, db *sql.DB, fn func() error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	key := LockKey("hermes-host:migrations")
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, key)
	return fn()
}

// LockKey is the 64-bit advisory lock key of name (FNV-1a), the same on every host.
func LockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// retryable reports whether err is PostgreSQL aborting a transaction that may simply be run
// again: a serialization failure or a deadlock.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// pgDriver marks a database opened by OpenPostgres (dialectOf looks for it) and carries its
// write health (HealthOf).
type pgDriver struct {
	base driver.Driver
	h    *Health
}

func (d *pgDriver) health() *Health { return d.h }

func (d *pgDriver) Open(name string) (driver.Conn, error) {
	c, err := d.base.Open(name)
	if err != nil {
		return nil, err
	}
	return &pgConn{base: c}, nil
}

type pgConnector struct {
	base driver.Connector
	drv  *pgDriver
}

func (c pgConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pgConn{base: conn}, nil
}

func (c pgConnector) Driver() driver.Driver { return c.drv }

// pgBase is what every connection of pgx's stdlib implements.
type pgBase interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.NamedValueChecker
}

// roundTrips counts the statements and transaction starts sent to PostgreSQL by this process.
var roundTrips atomic.Int64

// RoundTrips returns how many statements (and transaction starts) this process has sent to
// PostgreSQL so far; benchmarks divide its growth by the work done. A commit is one more trip
// per transaction start.
func RoundTrips() int64 { return roundTrips.Load() }

// pgConn forwards to pgx's connection, counting round trips and replacing NUL characters in
// string arguments (noNUL); the SQL passes unchanged.
type pgConn struct{ base driver.Conn }

func (c *pgConn) b() pgBase { return c.base.(pgBase) }

// Unwrap returns pgx's connection.
func (c *pgConn) Unwrap() driver.Conn { return c.base }

func (c *pgConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}
func (c *pgConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.b().PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgStmt{st.(pgBaseStmt)}, nil
}
func (c *pgConn) Close() error { return c.base.Close() }
func (c *pgConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}
func (c *pgConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	roundTrips.Add(1)
	return c.b().BeginTx(ctx, opts)
}
func (c *pgConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	roundTrips.Add(1)
	return c.b().ExecContext(ctx, query, noNUL(args))
}
func (c *pgConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	roundTrips.Add(1)
	return c.b().QueryContext(ctx, query, noNUL(args))
}

// noNUL replaces NUL characters in string arguments with U+FFFD. PostgreSQL's text cannot hold
// U+0000 and refuses the whole statement, so one chat message containing it (which SQLite
// stores) would be refused again at every redelivery and block its chat's intake. The message
// is kept, with the replacement character where the NUL was. Byte arguments (bytea) keep
// their NULs.
func noNUL(args []driver.NamedValue) []driver.NamedValue {
	for i, a := range args {
		if s, ok := a.Value.(string); ok && strings.IndexByte(s, 0) >= 0 {
			args[i].Value = strings.ReplaceAll(s, "\x00", "\uFFFD")
		}
	}
	return args
}
func (c *pgConn) Ping(ctx context.Context) error              { return c.b().Ping(ctx) }
func (c *pgConn) ResetSession(ctx context.Context) error      { return c.b().ResetSession(ctx) }
func (c *pgConn) CheckNamedValue(nv *driver.NamedValue) error { return c.b().CheckNamedValue(nv) }

// pgBaseStmt is what every statement of pgx's stdlib implements.
type pgBaseStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// pgStmt is a prepared statement whose arguments pass noNUL and whose runs are counted.
type pgStmt struct{ pgBaseStmt }

func (s pgStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	roundTrips.Add(1)
	return s.pgBaseStmt.ExecContext(ctx, noNUL(args))
}

func (s pgStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	roundTrips.Add(1)
	return s.pgBaseStmt.QueryContext(ctx, noNUL(args))
}
