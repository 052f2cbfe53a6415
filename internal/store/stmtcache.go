package store

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync/atomic"
)

// The statement cache. database/sql prepares nothing for a plain Exec or Query: modernc's
// connection parses the SQL text, runs it and finalizes it, every time. On the inbound path
// that parsing was 15% of the host's CPU (BenchmarkInbound's profile), much of it inside the
// write gate, where it delays every other writer. So each gated connection keeps its
// statements prepared, by query text, and runs them again with new arguments; SQLite prepares
// a statement again by itself when the schema changed under it.
//
// A cached statement is used by one call at a time: while rows of it are open (a query being
// iterated, with the same query run inside the loop), the other call takes the uncached path.
// Scripts (several statements in one text) are never cached. At most maxCachedStmts
// statements are kept per connection; past that, one that is not in use is closed to make room.
// database/sql uses a connection from one goroutine at a time (rows are closed under the same
// connection lock), so the cache needs no lock of its own.

// maxCachedStmts bounds a connection's cached statements (a few KiB each in SQLite).
const maxCachedStmts = 128

// prepares counts the statements the cache prepared (tests and benchmarks read it).
var prepares atomic.Int64

// Prepares reports how many statements connections opened by Open prepared for their caches.
func Prepares() int64 { return prepares.Load() }

type cachedStmt struct {
	s    baseStmt
	busy bool // rows of it are open
}

// cached returns the connection's statement for query, preparing it if need be, or nil when
// query must take the uncached path (a script, or its statement is in use).
func (c *gatedConn) cached(ctx context.Context, query string) (*cachedStmt, error) {
	if cs, ok := c.stmts[query]; ok {
		if cs.busy {
			return nil, nil
		}
		return cs, nil
	}
	if strings.Contains(strings.TrimRight(query, "; \t\r\n"), ";") {
		return nil, nil // a script (or a literal with a semicolon): parsed each time, as before
	}
	if len(c.stmts) >= maxCachedStmts && !c.evict() {
		return nil, nil
	}
	s, err := c.b().PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	prepares.Add(1)
	if c.stmts == nil {
		c.stmts = map[string]*cachedStmt{}
	}
	cs := &cachedStmt{s: s.(baseStmt)}
	c.stmts[query] = cs
	return cs, nil
}

// evict closes one cached statement that is not in use; false if every one is.
func (c *gatedConn) evict() bool {
	for q, cs := range c.stmts {
		if !cs.busy {
			cs.s.Close()
			delete(c.stmts, q)
			return true
		}
	}
	return false
}

// closeStmts closes every cached statement (the connection is closing).
func (c *gatedConn) closeStmts() {
	for q, cs := range c.stmts {
		cs.s.Close()
		delete(c.stmts, q)
	}
}

func (c *gatedConn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cs, err := c.cached(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.b().ExecContext(ctx, query, args)
	}
	return cs.s.ExecContext(ctx, args)
}

func (c *gatedConn) query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cs, err := c.cached(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.b().QueryContext(ctx, query, args)
	}
	rows, err := cs.s.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	cs.busy = true
	return &cachedRows{Rows: rows, cs: cs}, nil
}

// cachedRows are the rows of a cached statement: closing them frees the statement for reuse.
type cachedRows struct {
	driver.Rows
	cs *cachedStmt
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.cs.busy = false
	return err
}
