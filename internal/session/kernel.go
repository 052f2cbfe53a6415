package session

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Errors returned by the kernel. Store failures are returned wrapped as they come from
// database/sql; test them with errors.Is against these sentinels only.
var (
	// ErrNestedBoundary: WithBoundary (or a Kernel method that takes the lock) was called with
	// a context derived from a boundary's context. One goroutine holds at most one key lock;
	// inside the callback use the *Boundary's methods instead.
	ErrNestedBoundary = errors.New("session: nested boundary (use the Boundary's methods)")
	// ErrBoundaryClosed: a *Boundary was used after its callback returned.
	ErrBoundaryClosed = errors.New("session: boundary used outside its callback")
	// ErrNoRoute: the key has no session yet.
	ErrNoRoute = errors.New("session: key has no session")
	// ErrNotFound: the named session does not exist (for this key).
	ErrNotFound = errors.New("session: no such session")
	// ErrConflict: the route is not in the state the caller expected (compare-and-set failed).
	ErrConflict = errors.New("session: route changed (conflict)")
	// ErrKeyMismatch: a source or stamp does not belong to the key it was used with.
	ErrKeyMismatch = errors.New("session: source does not match the session key")
	// ErrSuperseded: work started at an older generation of the key (after /stop, /new, …).
	ErrSuperseded = errors.New("session: generation superseded")
)

// End reasons recorded on a session row.
const (
	EndReset       = "session_reset"  // /new, /reset
	EndSwitch      = "session_switch" // /resume, /branch
	EndCompression = "compression"    // a compression child continues the conversation
	EndUserExit    = "user_exit"
	EndNewSession  = "new_session"
	EndIdle        = "idle"
	EndDaily       = "daily"
	EndSuspended   = "suspended" // replaced at the first lookup after a suspension
	EndAgentClose  = "agent_close"
	EndWSOrphan    = "ws_orphan_reap"
	EndTimeout     = "timeout"
	EndCronDone    = "cron_complete"
)

// UserBoundary reports whether reason ends a session because the user left it: a notification
// for such a session is stale. The classifier and Resolve share this one list.
func UserBoundary(reason string) bool {
	switch reason {
	case EndReset, EndSwitch, EndUserExit, EndNewSession:
		return true
	}
	return false
}

// reopenable reports whether a routed row ended with reason is reopened (same id) at the next
// lookup rather than replaced (Python #54878).
func reopenable(reason string) bool { return reason == EndAgentClose || reason == EndWSOrphan }

// How a session row came to be (sessions.created_by).
const (
	createdNew         = "new"
	createdReset       = "reset"
	createdCompression = "compression"
	createdBranch      = "branch"
	createdReplace     = "replace"
)

// LiveProcesses tells auto-reset whether a key has a live background process. An error counts
// as "live" (the session is kept). It is called inside the key's boundary with the boundary's
// context and must not call back into the kernel for that key.
type LiveProcesses interface {
	HasLiveProcess(ctx context.Context, key string) (bool, error)
}

// ResetMode selects the optional time-based auto-reset.
type ResetMode int

// Auto-reset modes. The default, ResetNone, never replaces a session because of time.
const (
	ResetNone  ResetMode = iota
	ResetIdle            // after IdleAfter without user activity
	ResetDaily           // at the first activity after AtHour each day
	ResetBoth            // either
)

// ResetPolicy configures auto-reset. The zero value is off.
type ResetPolicy struct {
	Mode      ResetMode
	IdleAfter time.Duration  // idle limit; default 24h
	AtHour    int            // hour of the daily reset, 0-23 (0 is midnight)
	Location  *time.Location // time zone of AtHour; default UTC
}

// Options configure a Kernel. The zero value is a working single-instance configuration.
type Options struct {
	Keys KeyOptions
	// Locker is the boundary lock. Default: NewLocalLocker() on SQLite, NewPostgresLocker(db)
	// on PostgreSQL, where other hosts may share the database. Open refuses a LocalLocker on
	// PostgreSQL.
	Locker    Locker
	Now       func() time.Time // default time.Now
	AutoReset ResetPolicy      // default off
	Processes LiveProcesses    // consulted by auto-reset; nil means no process is ever live
	// CacheSize bounds the warm route cache (keys). 0 means 262144; negative disables it,
	// which a deployment with a multi-instance Locker must do. On PostgreSQL the cache is
	// always off: another host sharing the database would make it stale.
	CacheSize int
	// MaxTipHops bounds compression-tip walks. Default 100.
	MaxTipHops int
	// ReadOnly opens the kernel for reading only (List, Show; the CLI beside a serving host, on
	// a database opened with store.OpenReader): Open migrates nothing.
	ReadOnly bool
}

// Kernel is the session boundary: keys, physical sessions, transitions, the boundary lock and
// stale classification, persisted in SQLite or PostgreSQL. It is safe for concurrent use.
type Kernel struct {
	db      *sql.DB
	shared  bool // other hosts may share the database (store.Shared)
	opt     Options
	locker  Locker
	cache   *routeCache
	flights flightGroup

	stRoute, stRow, stChild, stTouch *sql.Stmt

	aliasMu   sync.Mutex                  // serializes AliasChat (writers of aliases)
	aliases   atomic.Pointer[chatAliases] // read by Key without a lock; see alias.go
	aliasesAt atomic.Int64                // when aliases was loaded (unix ns; refreshed on PostgreSQL)

	// failpoint, when set (tests only), runs at named stages inside transactions; an error aborts
	// the transaction.
	failpoint func(stage string) error
}

// Open migrates the session tables in db (component "session"; not with Options.ReadOnly) and
// returns a Kernel over it.
// db should come from store.Open or store.OpenSource. Close the Kernel before the DB.
//
// On PostgreSQL, where several hosts may share the database, Open configures the kernel for
// that: the boundary lock defaults to NewPostgresLocker(db) (a LocalLocker is refused, as it
// would let two hosts into one key's boundary) and the route cache is off, so every check
// inside the boundary reads the database.
func Open(ctx context.Context, db *sql.DB, opt Options) (*Kernel, error) {
	shared := store.Shared(db)
	if shared {
		if _, ok := opt.Locker.(*LocalLocker); ok {
			return nil, errors.New("session: a LocalLocker on PostgreSQL would not exclude the other hosts sharing the database; leave Options.Locker nil for the PostgreSQL advisory lock")
		}
		if opt.Locker == nil {
			if n := db.Stats().MaxOpenConnections; n == 1 {
				return nil, errors.New("session: a PostgreSQL pool of one connection cannot hold a boundary lock and run the boundary's queries")
			}
			opt.Locker = NewPostgresLocker(db)
		}
		opt.CacheSize = -1
	}
	if !opt.ReadOnly {
		if err := store.Migrate(ctx, db, Component, migrations); err != nil {
			return nil, err
		}
	}
	if opt.Locker == nil {
		opt.Locker = NewLocalLocker()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.MaxTipHops <= 0 {
		opt.MaxTipHops = 100
	}
	if opt.AutoReset.IdleAfter <= 0 {
		opt.AutoReset.IdleAfter = 24 * time.Hour
	}
	if opt.AutoReset.Location == nil {
		opt.AutoReset.Location = time.UTC
	}
	k := &Kernel{db: db, shared: shared, opt: opt, locker: opt.Locker, cache: newRouteCache(opt.CacheSize)}
	if err := k.loadAliases(ctx); err != nil {
		return nil, err
	}
	var err error
	prep := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var s *sql.Stmt
		s, err = db.PrepareContext(ctx, q)
		return s
	}
	k.stRoute = prep(qRoute)
	k.stRow = prep(qRow)
	k.stChild = prep(qChild)
	k.stTouch = prep(qTouch)
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("session: prepare: %w", err)
	}
	return k, nil
}

// Close releases the kernel's prepared statements. It does not close the DB.
func (k *Kernel) Close() error {
	for _, s := range []*sql.Stmt{k.stRoute, k.stRow, k.stChild, k.stTouch} {
		if s != nil {
			s.Close()
		}
	}
	return nil
}

// Key builds the session key of src under the kernel's key options. A chat that continues
// another (AliasChat) is keyed with that chat's id.
func (k *Kernel) Key(src abi.Source) (string, error) { return BuildKey(k.aliased(src), k.opt.Keys) }

// ParseKey parses key under the kernel's key options.
func (k *Kernel) ParseKey(key string) (Key, error) { return ParseKey(key, k.opt.Keys) }

func (k *Kernel) now() time.Time { return k.opt.Now() }

type boundaryCtxKey struct{}

// InBoundary reports whether ctx was derived from a Boundary's context, i.e. whether the caller
// already holds a key's boundary lock.
func InBoundary(ctx context.Context) bool { return ctx.Value(boundaryCtxKey{}) != nil }

// Boundary is the handle of a held boundary lock, valid only inside the WithBoundary callback
// that received it. Its methods are the transitions, lookups, appends and classifications of
// the one key it locks; they run under the lock without taking it again, so calling them from
// the callback cannot deadlock. It must not be used by other goroutines.
type Boundary struct {
	k      *Kernel
	key    string
	hold   *pgHold // the PostgreSQL lock, for Verify; nil with other Lockers
	ctx    context.Context
	closed atomic.Bool
}

// WithBoundary runs fn while holding key's boundary lock. Everything fn does through b is
// serialized with every transition of key: a classification followed by a send inside fn
// cannot be overtaken by /new, /resume, compression or auto-reset.
//
// Lock discipline: a goroutine holds at most one key lock. ctx (and b.Context()) carry a marker,
// and WithBoundary called with a marked context returns ErrNestedBoundary instead of
// deadlocking. The SQLite write lock is only ever taken while holding a key lock, never the
// other way round, and fn's own slow work (a platform send) does not hold any SQLite lock. On
// PostgreSQL the key lock is the in-process lock, then a holder slot, then the advisory lock on
// its own connection, always in that order; fn's queries use other connections of the pool,
// and at most half the pool holds locks (PostgresLocker), so holders never starve their own
// queries of connections.
func (k *Kernel) WithBoundary(ctx context.Context, key string, fn func(b *Boundary) error) error {
	_, err := k.boundary(ctx, key, nil, fn)
	return err
}

// TryBoundary is WithBoundary that waits at most wait for the key's lock. If another holder
// keeps it longer, fn does not run and TryBoundary reports false with no error. The wait bounds
// only the lock: fn runs under ctx as in WithBoundary.
func (k *Kernel) TryBoundary(ctx context.Context, key string, wait time.Duration, fn func(b *Boundary) error) (bool, error) {
	return k.boundary(ctx, key, &wait, fn)
}

func (k *Kernel) boundary(ctx context.Context, key string, wait *time.Duration, fn func(b *Boundary) error) (bool, error) {
	if InBoundary(ctx) {
		return false, ErrNestedBoundary
	}
	if key == "" {
		return false, fmt.Errorf("%w: empty key", ErrMalformedKey)
	}
	lctx := ctx
	if wait != nil {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, *wait)
		defer cancel()
	}
	var (
		unlock func()
		hold   *pgHold
		err    error
	)
	if pl, ok := k.locker.(*PostgresLocker); ok {
		if hold, err = pl.lock(lctx, key); err == nil {
			unlock = hold.unlock
		}
	} else {
		unlock, err = k.locker.Lock(lctx, key)
	}
	if err != nil {
		if wait != nil && ctx.Err() == nil {
			return false, nil // held by someone else for longer than wait
		}
		return false, fmt.Errorf("session: boundary %s: %w", key, err)
	}
	defer unlock()
	b := &Boundary{k: k, key: key, hold: hold, ctx: context.WithValue(ctx, boundaryCtxKey{}, key)}
	defer b.closed.Store(true)
	return true, fn(b)
}

// Key returns the key this boundary locks.
func (b *Boundary) Key() string { return b.key }

// Context returns the boundary's context: the caller's, marked as inside a boundary. Pass it to
// anything called from the callback.
func (b *Boundary) Context() context.Context { return b.ctx }

// Verify returns nil if the boundary lock is provably still held, or an error wrapping
// ErrLockLost if the PostgreSQL connection holding it has failed (PostgreSQL then released the
// lock, and another host may be inside this key's boundary). It costs one database round trip on
// PostgreSQL and nothing with a LocalLocker, whose lock cannot be lost. Call it just before an
// irreversible step (a platform send) when acting on a lost lock would do harm.
func (b *Boundary) Verify() error {
	if err := b.check(); err != nil {
		return err
	}
	if b.hold == nil {
		return nil
	}
	return b.hold.verify(b.ctx)
}

func (b *Boundary) check() error {
	if b.closed.Load() {
		return ErrBoundaryClosed
	}
	return b.ctx.Err()
}

// Route names a key's current physical session and the key's generation.
type Route struct {
	Key        string `json:"key"`
	SessionID  string `json:"session_id"`
	Generation int64  `json:"generation"`
}

// Ref returns r as the ABI's SessionRef.
func (r Route) Ref() abi.SessionRef {
	return abi.SessionRef{Key: r.Key, SessionID: r.SessionID, Generation: r.Generation}
}

// ---- store access --------------------------------------------------------------------------

const (
	qRoute = `SELECT r.session_id, r.generation, r.suspended, r.updated_at,
		s.id IS NOT NULL, s.ended_at IS NOT NULL, COALESCE(s.end_reason, '')
		FROM session_routes r LEFT JOIN sessions s ON s.id = r.session_id
		WHERE r.session_key = $1`
	qRow   = `SELECT session_key, ended_at IS NOT NULL, COALESCE(end_reason, '') FROM sessions WHERE id = $1`
	qChild = `SELECT id, ended_at IS NOT NULL, COALESCE(end_reason, '') FROM sessions
		WHERE parent_session_id = $1 AND created_by = 'compression' ORDER BY rowid DESC LIMIT 1`
	qTouch = `UPDATE session_routes SET updated_at = $1 WHERE session_key = $2 AND session_id = $3 AND generation = $4`
)

// routeState is a key's routing row joined with its session row.
type routeState struct {
	exists    bool // the key has a route
	sid       string
	gen       int64
	suspended bool
	updatedAt int64
	rowExists bool // the routed session row exists
	ended     bool
	reason    string
}

func (st routeState) entry() cacheEntry {
	return cacheEntry{sid: st.sid, gen: st.gen, live: st.rowExists && !st.ended && !st.suspended}
}

func (st routeState) route(key string) Route {
	return Route{Key: key, SessionID: st.sid, Generation: st.gen}
}

func (k *Kernel) loadRoute(ctx context.Context, key string) (routeState, error) {
	var st routeState
	err := k.stRoute.QueryRowContext(ctx, key).Scan(&st.sid, &st.gen, &st.suspended, &st.updatedAt,
		&st.rowExists, &st.ended, &st.reason)
	if errors.Is(err, sql.ErrNoRows) {
		return routeState{}, nil
	}
	if err != nil {
		return routeState{}, fmt.Errorf("session: load route %s: %w", key, err)
	}
	st.exists = true
	return st, nil
}

// rowState is the part of a session row that classification needs.
type rowState struct {
	id     string
	key    string
	exists bool
	ended  bool
	reason string
}

func (k *Kernel) loadRow(ctx context.Context, id string) (rowState, error) {
	r := rowState{id: id}
	err := k.stRow.QueryRowContext(ctx, id).Scan(&r.key, &r.ended, &r.reason)
	if errors.Is(err, sql.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("session: load session %s: %w", id, err)
	}
	r.exists = true
	return r, nil
}

// errTipWalk reports a compression chain that is cyclic or longer than MaxTipHops.
var errTipWalk = errors.New("session: compression chain is cyclic or too long")

// tip follows compression children from the row r (which must exist) to the newest
// continuation: while the current row ended by compression, step to its newest child created
// by compression (branches and other children are never followed). It returns r itself when r
// was not compressed or no continuation is visible.
func (k *Kernel) tip(ctx context.Context, r rowState) (rowState, error) {
	seen := map[string]bool{r.id: true}
	for hops := 0; r.ended && r.reason == EndCompression; hops++ {
		if hops >= k.opt.MaxTipHops {
			return r, errTipWalk
		}
		c := rowState{key: r.key}
		err := k.stChild.QueryRowContext(ctx, r.id).Scan(&c.id, &c.ended, &c.reason)
		if errors.Is(err, sql.ErrNoRows) {
			return r, nil
		}
		if err != nil {
			return r, fmt.Errorf("session: compression tip of %s: %w", r.id, err)
		}
		if seen[c.id] {
			return r, errTipWalk
		}
		seen[c.id] = true
		c.exists = true
		r = c
	}
	return r, nil
}

// Tip returns the compression tip of session id (id itself when it was not compressed or its
// continuation is not visible yet).
func (k *Kernel) Tip(ctx context.Context, id string) (string, error) {
	r, err := k.loadRow(ctx, id)
	if err != nil {
		return "", err
	}
	if !r.exists {
		return "", fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	t, err := k.tip(ctx, r)
	return t.id, err
}

// Current returns the key's route as stored, without taking the lock and without repairing it.
// Outside a boundary the answer may be one transition old by the time it is used.
func (k *Kernel) Current(ctx context.Context, key string) (Route, bool, error) {
	if e, ok := k.cache.get(key); ok {
		return Route{Key: key, SessionID: e.sid, Generation: e.gen}, true, nil
	}
	st, err := k.loadRoute(ctx, key)
	if err != nil || !st.exists {
		return Route{}, false, err
	}
	return st.route(key), true, nil
}

// Current returns the key's route, exactly as committed (the lock is held).
func (b *Boundary) Current() (Route, bool, error) {
	if err := b.check(); err != nil {
		return Route{}, false, err
	}
	st, err := b.load()
	if err != nil || !st.exists {
		return Route{}, false, err
	}
	return st.route(b.key), true, nil
}

// load reads the key's route under the lock and refreshes the cache from it.
func (b *Boundary) load() (routeState, error) {
	st, err := b.k.loadRoute(b.ctx, b.key)
	if err != nil {
		b.k.cache.drop(b.key)
		return st, err
	}
	if st.exists {
		b.k.cache.set(b.key, st.entry())
	} else {
		b.k.cache.drop(b.key)
	}
	return st, nil
}

// tx runs fn in one unit of work (store.Update: what other packages wrote in it through the
// same *store.Tx commits with it, and their after-commit work runs once it did). On any error
// the key's cache entry is dropped, so the next reader under the lock goes to the store.
func (b *Boundary) tx(fn func(tx *store.Tx) error) error {
	err := store.Update(b.ctx, b.k.db, store.PathSessions, fn)
	if err != nil {
		b.k.cache.drop(b.key)
	}
	return err
}

func (k *Kernel) fail(stage string) error {
	if k.failpoint != nil {
		return k.failpoint(stage)
	}
	return nil
}

// mustAffect turns an update that changed no row (a compare-and-set that lost) into
// ErrConflict.
func mustAffect(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: store row not in the expected state", ErrConflict)
	}
	return nil
}

func encodeSource(src abi.Source) string {
	b, _ := json.Marshal(src) // abi.Source has only string fields: cannot fail
	return string(b)
}

// insertSession inserts a new row that becomes current at the key's generation gen, retrying
// with a fresh id on the (astronomically rare) id collision. origin == "" copies the origin of
// parent. ON CONFLICT DO NOTHING turns a collision into "no row inserted" rather than an error,
// which on PostgreSQL would abort the whole transaction.
func (b *Boundary) insertSession(tx *store.Tx, parent, branchedFrom, createdBy, origin string, title sql.NullString,
	gen int64, now time.Time) (string, error) {
	for attempt := 0; ; attempt++ {
		id := NewSessionID(now)
		var res sql.Result
		var err error
		if origin == "" {
			res, err = tx.ExecContext(b.ctx, `INSERT INTO sessions
				(id, session_key, parent_session_id, branched_from, created_by, created_gen, started_at, origin, title)
				SELECT $1, $2, $3, $4, $5, $6, $7, origin, $8 FROM sessions WHERE id = $9
				ON CONFLICT (id) DO NOTHING`,
				id, b.key, nullStr(parent), nullStr(branchedFrom), createdBy, gen, now.UnixMilli(), title, parent)
		} else {
			res, err = tx.ExecContext(b.ctx, `INSERT INTO sessions
				(id, session_key, parent_session_id, branched_from, created_by, created_gen, started_at, origin, title)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING`,
				id, b.key, nullStr(parent), nullStr(branchedFrom), createdBy, gen, now.UnixMilli(), origin, title)
		}
		if err != nil {
			return "", err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 1 {
			return id, err
		}
		// Nothing inserted: the id is taken, or (copying its origin) the parent is missing.
		var taken int
		if err := tx.QueryRowContext(b.ctx, `SELECT COUNT(*) FROM sessions WHERE id = $1`, id).Scan(&taken); err != nil {
			return "", err
		}
		if taken == 0 {
			return "", fmt.Errorf("%w: store row not in the expected state", ErrConflict)
		}
		if attempt >= 3 {
			return "", fmt.Errorf("session: new session id %s already taken %d times", id, attempt+1)
		}
	}
}

// bytewise returns col compared byte by byte (store.Bytewise): key ranges (a prefix and
// everything after it up to the next byte) assume byte order.
func (k *Kernel) bytewise(col string) string { return store.Bytewise(k.db, col) }

func nullStr(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// ---- single flight -------------------------------------------------------------------------

// flightGroup coalesces concurrent Resolve calls for one key: callers that arrive while one is
// in flight (waiting for the lock or running) share its result.
type flightGroup struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done    chan struct{}
	res     Resolution
	err     error
	joiners int
}

func (g *flightGroup) do(ctx context.Context, key string, fn func() (Resolution, error)) (Resolution, error) {
	g.mu.Lock()
	if g.m == nil {
		g.m = make(map[string]*flight)
	}
	if f := g.m[key]; f != nil {
		f.joiners++
		g.mu.Unlock()
		select {
		case <-f.done:
			return f.res, f.err
		case <-ctx.Done():
			return Resolution{}, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	g.m[key] = f
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.m, key)
		g.mu.Unlock()
		close(f.done)
	}()
	f.res, f.err = fn()
	return f.res, f.err
}

func (g *flightGroup) joined(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.m[key]; f != nil {
		return f.joiners
	}
	return -1
}
