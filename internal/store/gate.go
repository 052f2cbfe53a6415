package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// The write gate. SQLite admits one writer at a time; a writer that finds the database locked
// polls from SQLite's busy handler, sleeping 1, 2, 5, 10 … 100 ms between tries, so under many
// concurrent writers (ledger lanes, turns, the process writer, session transitions) the sleeps,
// not the writes, become the cost, and a writer that keeps losing the race can wait past the busy
// timeout while the others go on (SQLITE_BUSY, seen in the /new race test). The gate queues
// writers in Go instead, first come first served, and wakes the next one the moment the writer
// before it is done:
//
//   - a transaction holds the gate from Begin to Commit or Rollback (every transaction here is
//     BEGIN IMMEDIATE, a write transaction);
//   - a statement executed outside a transaction (Exec) holds it while it runs;
//   - queries never take it: in WAL mode readers block neither the writer nor each other.
//
// It stands for SQLite's write lock and is, like it, the innermost lock: taken under a session
// boundary, never the other way round. A writer waits for it at most the busy timeout and then
// fails as SQLite would; a goroutine that writes outside the transaction it holds fails after
// that wait instead of deadlocking. Other processes (the CLI, a second host) still meet SQLite's
// own lock and busy handler.
type gate struct {
	ch      chan struct{}
	timeout time.Duration
}

// ErrBusy is returned when a writer waited the whole busy timeout for the write gate.
var ErrBusy = errors.New("store: database is busy: another writer held it for the whole busy timeout")

func (g *gate) acquire(ctx context.Context) error {
	select {
	case g.ch <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("%w (%v)", ErrBusy, g.timeout)
	}
}

func (g *gate) release() { <-g.ch }

// gatedConnector opens connections whose writes pass the gate.
type gatedConnector struct {
	driver.Connector
	gate *gate
}

func (c gatedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &gatedConn{base: conn, gate: c.gate}, nil
}

// baseConn is what every connection of modernc.org/sqlite implements.
type baseConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// gatedConn forwards everything to the driver's connection, taking the gate for writes, and
// keeps its statements prepared (stmtcache.go).
// database/sql uses a connection from one goroutine at a time, so inTx needs no lock.
type gatedConn struct {
	base  driver.Conn
	gate  *gate
	inTx  bool
	stmts map[string]*cachedStmt // by query text (stmtcache.go)
}

func (c *gatedConn) b() baseConn { return c.base.(baseConn) }

// Unwrap returns the driver's connection (modernc's helpers look through wrappers with it).
func (c *gatedConn) Unwrap() driver.Conn { return c.base }

func (c *gatedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *gatedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.b().PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &gatedStmt{base: s, conn: c}, nil
}

func (c *gatedConn) Close() error {
	c.closeStmts()
	return c.base.Close()
}

func (c *gatedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *gatedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.gate.acquire(ctx); err != nil {
		return nil, err
	}
	tx, err := c.b().BeginTx(ctx, opts)
	if err != nil {
		c.gate.release()
		return nil, err
	}
	c.inTx = true
	return &gatedTx{base: tx, conn: c}, nil
}

// write runs fn holding the gate, unless this connection is in a transaction (which holds it).
func (c *gatedConn) write(ctx context.Context, fn func() (driver.Result, error)) (driver.Result, error) {
	if c.inTx {
		return fn()
	}
	if err := c.gate.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.gate.release()
	return fn()
}

func (c *gatedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.write(ctx, func() (driver.Result, error) { return c.exec(ctx, query, args) })
}

func (c *gatedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.query(ctx, query, args)
}

func (c *gatedConn) Ping(ctx context.Context) error         { return c.b().Ping(ctx) }
func (c *gatedConn) ResetSession(ctx context.Context) error { return c.b().ResetSession(ctx) }
func (c *gatedConn) IsValid() bool                          { return c.b().IsValid() }

func (c *gatedConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.base.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type gatedTx struct {
	base driver.Tx
	conn *gatedConn
}

func (t *gatedTx) Commit() error   { return t.end(t.base.Commit) }
func (t *gatedTx) Rollback() error { return t.end(t.base.Rollback) }

func (t *gatedTx) end(fn func() error) error {
	err := fn()
	if t.conn.inTx {
		t.conn.inTx = false
		t.conn.gate.release()
	}
	return err
}

// baseStmt is what every statement of modernc.org/sqlite implements.
type baseStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

type gatedStmt struct {
	base driver.Stmt
	conn *gatedConn
}

func (s *gatedStmt) b() baseStmt   { return s.base.(baseStmt) }
func (s *gatedStmt) Close() error  { return s.base.Close() }
func (s *gatedStmt) NumInput() int { return s.base.NumInput() }

func (s *gatedStmt) Exec(args []driver.Value) (driver.Result, error) {
	return nil, errors.New("store: Stmt.Exec without a context is not supported")
}

func (s *gatedStmt) Query(args []driver.Value) (driver.Rows, error) {
	return nil, errors.New("store: Stmt.Query without a context is not supported")
}

func (s *gatedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.conn.write(ctx, func() (driver.Result, error) { return s.b().ExecContext(ctx, args) })
}

func (s *gatedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.b().QueryContext(ctx, args)
}

func (s *gatedStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.base.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return s.conn.CheckNamedValue(nv)
}
