package process

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// Component is the migrations component name of this package's tables.
const Component = "process"

// migrations are append-only: never edit or reorder a released one.
var migrations = []string{
	`CREATE TABLE processes (
		id            TEXT PRIMARY KEY,
		gen           INTEGER NOT NULL,          -- checkpoint generation; a write applies only if newer
		command       TEXT NOT NULL,
		dir           TEXT NOT NULL DEFAULT '',
		pid           INTEGER NOT NULL DEFAULT 0,
		start_ticks   INTEGER NOT NULL DEFAULT 0, -- /proc/<pid>/stat field 22 at spawn
		state         TEXT NOT NULL,
		exit_code     INTEGER,                    -- NULL: running or unknown
		signal        TEXT NOT NULL DEFAULT '',
		reason        TEXT NOT NULL DEFAULT '',
		session_key   TEXT NOT NULL DEFAULT '',
		session_id    TEXT NOT NULL DEFAULT '',
		stamp         TEXT NOT NULL,              -- JSON session.Stamp
		notify        INTEGER NOT NULL DEFAULT 0,
		watch         TEXT NOT NULL DEFAULT '[]', -- JSON list of patterns
		watch_disabled INTEGER NOT NULL DEFAULT 0,
		watch_matches INTEGER NOT NULL DEFAULT 0,
		output_chars  INTEGER NOT NULL DEFAULT 0,
		output_bytes  INTEGER NOT NULL DEFAULT 0,
		max_age_ms    INTEGER NOT NULL DEFAULT 0,
		consumed      INTEGER NOT NULL DEFAULT 0,
		adopted       INTEGER NOT NULL DEFAULT 0,
		owner         TEXT NOT NULL DEFAULT '',   -- writer identity pid:starttime
		started_at    INTEGER NOT NULL,           -- unix ms
		ended_at      INTEGER,                    -- unix ms
		updated_at    INTEGER NOT NULL
	);
	CREATE INDEX processes_state ON processes(state);
	CREATE TABLE process_events (
		seq         INTEGER PRIMARY KEY AUTOINCREMENT,
		proc_id     TEXT NOT NULL,
		kind        TEXT NOT NULL,
		state       TEXT NOT NULL,               -- pending, claimed, done, suppressed
		payload     TEXT NOT NULL,               -- JSON Event
		token       TEXT NOT NULL DEFAULT '',
		lease_until INTEGER NOT NULL DEFAULT 0,  -- unix ms; a claim past it may be taken again
		not_before  INTEGER NOT NULL DEFAULT 0,  -- unix ms; set by Release with a delay
		attempts    INTEGER NOT NULL DEFAULT 0,
		outcome     TEXT NOT NULL DEFAULT '',
		created_at  INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL
	);
	CREATE UNIQUE INDEX process_events_one_completion ON process_events(proc_id) WHERE kind = 'completion';
	CREATE INDEX process_events_ready ON process_events(state, seq);
	CREATE INDEX process_events_proc ON process_events(proc_id);`,
	// Which host runs a process (several hosts on one database), and at most one correction of a
	// "lost" notice per process.
	`ALTER TABLE processes ADD COLUMN host TEXT NOT NULL DEFAULT '';
	CREATE INDEX processes_host ON processes(host, state);
	CREATE UNIQUE INDEX process_events_one_correction ON process_events(proc_id) WHERE kind = 'correction';`,
}

// Migrate creates or upgrades this package's tables. New and the CLI helpers call it; it is
// idempotent.
func Migrate(ctx context.Context, db *sql.DB) error {
	return store.Migrate(ctx, db, Component, migrations)
}

// Event queue states.
const (
	qPending    = "pending"
	qClaimed    = "claimed"
	qDone       = "done"
	qSuppressed = "suppressed"
)

const rowColumns = `id, gen, command, dir, pid, start_ticks, state, exit_code, signal, reason,
	session_key, session_id, stamp, notify, watch, watch_disabled, watch_matches, output_chars,
	output_bytes, max_age_ms, consumed, adopted, owner, started_at, ended_at, updated_at, host`

// upsertRow is the checkpoint compare-and-set: the first write inserts the row; any later write
// replaces it only when its generation is newer than the stored one, so a snapshot that lands
// late can never overwrite a newer one, and only when the stored row still names the host the
// writer expects (the last parameter; normally the writer itself), so a host whose process was
// taken over by another host (recorded as lost when this host's lease expired) cannot overwrite
// what the survivor recorded by writing it as its own. Such a host reconciles instead
// (reconcileRow).
var upsertRow = `INSERT INTO processes (` + rowColumns + `)
	VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
	ON CONFLICT(id) DO UPDATE SET ` + setExcluded(rowColumns) + `
	WHERE excluded.gen > processes.gen AND processes.host = ?`

func setExcluded(cols string) string {
	var b strings.Builder
	for _, c := range strings.Split(cols, ",") {
		c = strings.TrimSpace(c)
		if c == "id" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c + " = excluded." + c)
	}
	return b.String()
}

func rowArgs(in *Info, now time.Time) ([]any, error) {
	stamp, err := json.Marshal(in.Stamp)
	if err != nil {
		return nil, err
	}
	watch := "[]"
	if len(in.WatchPatterns) > 0 {
		b, err := json.Marshal(in.WatchPatterns)
		if err != nil {
			return nil, err
		}
		watch = string(b)
	}
	var exit, ended any
	if in.ExitCode != nil {
		exit = *in.ExitCode
	}
	if !in.EndedAt.IsZero() {
		ended = in.EndedAt.UnixMilli()
	}
	return []any{in.ID, in.Gen, in.Command, in.Dir, in.PID, int64(in.StartTicks), string(in.State),
		exit, in.Signal, in.Reason, in.Stamp.Key, in.Stamp.SessionID, string(stamp), flag(in.NotifyOnComplete),
		watch, flag(in.WatchDisabled), in.WatchMatches, in.OutputChars, in.OutputBytes,
		in.MaxAge.Milliseconds(), flag(in.Consumed), flag(in.Adopted), in.Owner, in.StartedAt.UnixMilli(), ended,
		now.UnixMilli(), in.Host}, nil
}

// flag is a boolean as the INTEGER columns hold it, 1 or 0: what SQLite's driver writes for a
// Go bool, and what PostgreSQL's BIGINT takes (pgx does not turn a bool into a number).
func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// writeRow applies one checkpoint in tx, provided the stored row (if any) names host from.
// applied is false when the stored row is as new or newer, or names another host.
func writeRow(ctx context.Context, tx *stmtTx, in *Info, from string, now time.Time) (applied bool, err error) {
	args, err := rowArgs(in, now)
	if err != nil {
		return false, err
	}
	res, err := tx.exec(ctx, upsertRow, append(args, from)...)
	if err != nil {
		return false, fmt.Errorf("process: checkpoint %s gen %d: %w", in.ID, in.Gen, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// stmtTx runs statements in one transaction, preparing each distinct query once: for the small
// writes of a checkpoint, parsing the SQL is most of the cost. With a stmtCache the statements
// are prepared once per connection for the life of the cache, not once per transaction.
type stmtTx struct {
	tx    *sql.Tx
	cache *stmtCache // may be nil
	stmts map[string]*sql.Stmt
}

func newStmtTx(tx *sql.Tx) *stmtTx { return &stmtTx{tx: tx, stmts: map[string]*sql.Stmt{}} }

func (s *stmtTx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, ok := s.stmts[query]
	if !ok {
		var err error
		if s.cache != nil {
			var shared *sql.Stmt
			if shared, err = s.cache.get(ctx, query); err == nil {
				st = s.tx.StmtContext(ctx, shared) // reuses the connection's prepared statement
			}
		} else {
			st, err = s.tx.PrepareContext(ctx, query)
		}
		if err != nil {
			return nil, err
		}
		s.stmts[query] = st // closed with the transaction
	}
	return st.ExecContext(ctx, args...)
}

// stmtCache holds statements prepared on the database for one user (the writer goroutine).
type stmtCache struct {
	db    *sql.DB
	stmts map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = map[string]*sql.Stmt{}
	}
	c.stmts[query] = st
	return st, nil
}

func (c *stmtCache) close() {
	for _, st := range c.stmts {
		st.Close()
	}
}

type scanner interface{ Scan(...any) error }

func scanRow(s scanner) (Info, error) {
	var (
		in                     Info
		state, stamp, watch    string
		ticks, maxAge, started int64
		updated                int64
		exit, ended            sql.NullInt64
	)
	err := s.Scan(&in.ID, &in.Gen, &in.Command, &in.Dir, &in.PID, &ticks, &state, &exit, &in.Signal,
		&in.Reason, &in.Stamp.Key, &in.Stamp.SessionID, &stamp, &in.NotifyOnComplete, &watch,
		&in.WatchDisabled, &in.WatchMatches, &in.OutputChars, &in.OutputBytes, &maxAge, &in.Consumed,
		&in.Adopted, &in.Owner, &started, &ended, &updated, &in.Host)
	if err != nil {
		return in, err
	}
	in.State = State(state)
	in.StartTicks = uint64(ticks)
	if exit.Valid {
		c := int(exit.Int64)
		in.ExitCode = &c
	}
	// A stamp that cannot be decoded must not read as "unstamped" (delivered by route): it is an
	// error, reported with the process id.
	if err := json.Unmarshal([]byte(stamp), &in.Stamp); err != nil {
		return in, fmt.Errorf("%w: process %s: stamp: %v", ErrCorrupt, in.ID, err)
	}
	if watch != "" && watch != "[]" {
		if err := json.Unmarshal([]byte(watch), &in.WatchPatterns); err != nil {
			return in, fmt.Errorf("%w: process %s: watch patterns: %v", ErrCorrupt, in.ID, err)
		}
	}
	in.MaxAge = time.Duration(maxAge) * time.Millisecond
	in.StartedAt = time.UnixMilli(started)
	if ended.Valid {
		in.EndedAt = time.UnixMilli(ended.Int64)
	}
	return in, nil
}

// loadRow reads the checkpoint of id.
func loadRow(ctx context.Context, db *sql.DB, id string) (Info, error) {
	in, err := scanRow(db.QueryRowContext(ctx, `SELECT `+rowColumns+` FROM processes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return in, ErrNotFound
	}
	return in, err
}

// insertEvent adds ev to the queue in the given queue state. A second completion for the same
// process is ignored (unique index), which makes "one completion per process" a property of the
// table, not only of the code paths that produce it.
func insertEvent(ctx context.Context, tx *stmtTx, ev *Event, state string, now time.Time) (inserted bool, err error) {
	payload, err := json.Marshal(ev)
	if err != nil {
		return false, err
	}
	outcome := ""
	if state == qSuppressed {
		outcome = "consumed"
	}
	res, err := tx.exec(ctx, `INSERT INTO process_events
		(proc_id, kind, state, payload, outcome, created_at, updated_at) VALUES (?,?,?,?,?,?,?)
		ON CONFLICT DO NOTHING`,
		ev.ProcID, string(ev.Kind), state, string(payload), outcome, now.UnixMilli(), now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("process: queue %s event of %s: %w", ev.Kind, ev.ProcID, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// suppressCompletion marks the process's undelivered completion (or correction) as suppressed
// because the agent consumed the result. A claimed one is suppressed too: Confirm and Ack then
// tell the delivery layer not to (or that it should not have) delivered it.
func suppressCompletion(ctx context.Context, tx *stmtTx, id string, now time.Time) error {
	_, err := tx.exec(ctx, `UPDATE process_events SET state = ?, outcome = 'consumed', updated_at = ?
		WHERE proc_id = ? AND kind IN (?, ?) AND state IN (?, ?)`,
		qSuppressed, now.UnixMilli(), id, string(EventCompletion), string(EventCorrection), qPending, qClaimed)
	return err
}
