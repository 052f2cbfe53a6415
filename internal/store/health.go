package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Write health. A store can answer reads while it refuses writes: a full disk, I/O errors, a
// read-only file system, another process holding SQLite's write lock, a PostgreSQL server out of
// space or gone. The host's durable write paths report each write's outcome here (Report), and
// /healthz reads the verdict (Health.Err), so the host says it is unhealthy as soon as one of
// them is refused, naming the path and the error, and ok again once the store takes writes,
// without a restart. It lives here, once, because every path meets the same store.
//
// Only a refusal counts (Refused): a cancelled context, a deadline, a constraint violation or a
// serialization conflict says nothing about whether the store takes writes.
//
// Health.Watch probes the store with a one-row write (probeQuery):
//
//   - while a path is failing, every ProbeEvery: a success clears the paths not refused for
//     Quiet before it started. The probe decides for every path alike (a path's own success
//     only keeps the idle probe off), so a path that has stopped writing (a ledger row nobody
//     retries, a kv key no plugin writes again) does not keep the host unhealthy after the
//     store came back;
//   - while the host is idle (no reported write succeeded within ProbeEvery): so a store that
//     refuses writes is noticed within ProbeEvery+ProbeTimeout (1.5 s) even when nothing else
//     writes, before the first inbound event meets it. A probe that has not committed within
//     ProbeTimeout counts as refused: an idle host's one-row write waits for nothing of its
//     own, so it is waiting for another process's lock or for a stalled disk.
//
// A host that writes anyway is not probed: its writes are the signal. An idle host commits 2
// probes a second. BenchmarkProbe measures one at about 50 µs on SQLite (one page rewritten in
// the WAL, no fsync with synchronous=NORMAL) and 150 µs on a local PostgreSQL (the test cluster,
// fsync off; a real server adds its commit flush): 0.01-0.03% of a core. On SQLite it adds one
// 4 KiB WAL frame per probe, 8 KiB/s, so an idle host checkpoints about every 8 minutes, in the
// same 4 MiB of WAL file. Cheap enough to keep the promise on an idle host; a probe's cost would
// matter only under load, where it does not run.
//
// Why Quiet: a store can refuse some writes and take others. A nearly full disk can take a probe
// that rewrites one page and refuse a write that needs more room. Were a success to clear the
// refused path at once, /healthz would flip between ok and unhealthy with every write; instead
// a refusal keeps the host unhealthy for at least Quiet, and until a probe that started after
// that succeeds.
const (
	ProbeEvery   = 500 * time.Millisecond
	ProbeTimeout = time.Second
	Quiet        = 3 * time.Second
)

// The write paths that report (Report's path), and the probe's own.
const (
	PathInbox     = "inbox"     // inbound events recorded (turn)
	PathLedger    = "ledger"    // outbound deliveries (delivery)
	PathKV        = "kv"        // plugin state (kv)
	PathSessions  = "sessions"  // sessions, routes and transcripts (session)
	PathProcesses = "processes" // background-process checkpoints and events (process)
	PathProbe     = "probe"     // Health.Watch's probe write
)

// ErrProbeTimeout is the probe's verdict on a one-row write that did not commit in time.
var ErrProbeTimeout = fmt.Errorf("store: a one-row probe write did not commit within %v", ProbeTimeout)

// Health is the write health of one database opened by this package (HealthOf). Its methods
// are safe for concurrent use, and do nothing on a nil *Health.
type Health struct {
	db  *sql.DB
	now func() time.Time

	// failing counts the paths in failures, so that the success of a write (the common case)
	// costs two atomic operations and no lock.
	failing atomic.Int32
	lastOK  atomic.Int64 // UnixNano of the last success a path reported (not the probe's)
	watched atomic.Bool  // a Watch runs

	mu       sync.Mutex
	failures map[string]*Failure
	log      *slog.Logger // set by Watch; nil: no log
}

// Failure is a write path the store refuses.
type Failure struct {
	Path  string    `json:"path"`
	Error string    `json:"error"` // the latest refusal
	Since time.Time `json:"since"` // the first refusal since the path was last healthy
	Last  time.Time `json:"last"`  // the latest refusal
	Count int       `json:"count"` // refusals since Since
}

func newHealth() *Health {
	return &Health{now: time.Now, failures: map[string]*Failure{}}
}

// HealthOf returns the write health of db, or nil if db was not opened by this package.
func HealthOf(db *sql.DB) *Health {
	if d, ok := db.Driver().(interface{ health() *Health }); ok {
		return d.health()
	}
	return nil
}

// Report records the outcome of a write on path (one of the Path constants): err is what the
// write returned. A refusal (Refused) makes path failing; any other error is ignored; nil marks
// the host as writing, so the idle probe stays off. Call it where the write's error is handled.
func Report(db *sql.DB, path string, err error) {
	h := HealthOf(db)
	switch {
	case h == nil:
	case err == nil:
		h.lastOK.Store(h.now().UnixNano())
	case Refused(err):
		h.fail(path, err)
	}
}

// Refused reports whether err says that the store refuses writes, as opposed to refusing this
// one (a constraint) or the caller giving up (a cancelled context): SQLite's busy, locked, full,
// I/O, read-only, cannot-open, corrupt and protocol errors; the write gate's ErrBusy;
// PostgreSQL's insufficient resources (53: disk full, out of memory, too many connections),
// system errors (58: I/O), connection exceptions (08), internal errors and corruption (XX),
// a read-only transaction (25006: a standby), a shutting-down server (57P01-57P03); and a
// connection that cannot be made or broke (the server is gone, driver.ErrBadConn).
func Refused(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrBusy) {
		return true
	}
	if code, ok := sqliteCode(err); ok {
		switch code {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB,
			sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOLFS, sqlite3.SQLITE_NOMEM:
			return true
		}
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "53"), strings.HasPrefix(pe.Code, "58"),
			strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "XX"):
			return true
		}
		switch pe.Code {
		case "25006", "57P01", "57P02", "57P03":
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EDQUOT)
}

// fail records a refusal on path.
func (h *Health) fail(path string, err error) {
	now := h.now()
	h.mu.Lock()
	f := h.failures[path]
	if f == nil {
		f = &Failure{Path: path, Since: now}
		h.failures[path] = f
		h.failing.Add(1)
		if h.log != nil {
			h.log.Error("store: writes refused; the host is unhealthy until the store takes them", "path", path, "error", err)
		}
	}
	f.Error, f.Last = err.Error(), now
	f.Count++
	h.mu.Unlock()
}

// recovered clears the failures whose latest refusal was at least Quiet before a probe that
// started at start and succeeded.
func (h *Health) recovered(start time.Time) {
	if h.failing.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for path, f := range h.failures {
		if start.Sub(f.Last) >= Quiet {
			delete(h.failures, path)
			h.failing.Add(-1)
			if h.log != nil {
				h.log.Info("store: takes writes again", "path", path, "refused_for", f.Last.Sub(f.Since).Round(time.Millisecond), "refusals", f.Count)
			}
		}
	}
}

// Failing lists the paths the store refuses, by path.
func (h *Health) Failing() []Failure {
	if h == nil || h.failing.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	out := make([]Failure, 0, len(h.failures))
	for _, f := range h.failures {
		out = append(out, *f)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b Failure) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Err returns nil while the store takes writes, and otherwise an error naming each failing path
// with its latest error and since when.
func (h *Health) Err() error {
	failing := h.Failing()
	if len(failing) == 0 {
		return nil
	}
	parts := make([]string, len(failing))
	for i, f := range failing {
		parts[i] = fmt.Sprintf("%s: %s (since %s, %d refused)", f.Path, f.Error, f.Since.UTC().Format(time.RFC3339), f.Count)
	}
	return errors.New("store refuses writes: " + strings.Join(parts, "; "))
}

// probeQuery is the probe: one row, rewritten in place (store_probe is created by Open).
const probeQuery = `INSERT INTO store_probe (id, at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET at = excluded.at`

// Watch probes the store until ctx is done (see the top of this file); log, if not nil, hears
// of each path that starts failing and of each that recovers. One Watch runs per database: a
// second call returns at once.
func (h *Health) Watch(ctx context.Context, log *slog.Logger) {
	if h == nil || !h.watched.CompareAndSwap(false, true) {
		return
	}
	defer h.watched.Store(false)
	h.mu.Lock()
	h.log = log
	h.mu.Unlock()
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := h.now().Sub(time.Unix(0, h.lastOK.Load())) >= ProbeEvery
		if h.failing.Load() > 0 || idle {
			h.probe(ctx)
		}
	}
}

// probe writes the probe row once and records the outcome.
func (h *Health) probe(ctx context.Context) {
	start := h.now()
	pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	_, err := h.db.ExecContext(pctx, probeQuery, start.UnixMilli())
	timedOut := pctx.Err() != nil
	cancel()
	switch {
	case ctx.Err() != nil: // stopping: says nothing about the store
	case err == nil:
		h.recovered(start)
	case Refused(err):
		h.fail(PathProbe, err)
	case timedOut:
		h.fail(PathProbe, fmt.Errorf("%w: %w", ErrProbeTimeout, err))
	case h.log != nil:
		h.log.Warn("store: the probe write failed", "error", err)
	}
}

// sqliteCode is the primary SQLite result code err carries (extended codes keep it in the low
// byte), if it carries one.
func sqliteCode(err error) (int, bool) {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	return se.Code() & 0xff, true
}
