package turn

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/session"
)

// The inbox is the durable record of inbound events and queued notification turns. Its unique
// index on (plugin, profile, event_id) is the inbound deduplication: a platform retry, a
// replayed poll batch or a restart never produces a second turn for one event.
var migrations = []string{`
CREATE TABLE turn_inbox (
	id          TEXT PRIMARY KEY,
	plugin      TEXT NOT NULL,
	profile     TEXT NOT NULL,
	event_id    TEXT,
	kind        TEXT NOT NULL,
	session_key TEXT NOT NULL,
	source      TEXT NOT NULL,
	text        TEXT NOT NULL,
	stamp       TEXT NOT NULL DEFAULT '',
	state       TEXT NOT NULL,
	outcome     TEXT NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX turn_inbox_dedupe ON turn_inbox (plugin, profile, event_id) WHERE event_id IS NOT NULL;
CREATE INDEX turn_inbox_open ON turn_inbox (state, created_at) WHERE state IN ('queued', 'running');`,
	// Inbound events are recorded (state 'received') before the chat's boundary is taken, and
	// applied under it afterwards; event_kind is what applying needs to know.
	`ALTER TABLE turn_inbox ADD COLUMN event_kind TEXT NOT NULL DEFAULT '';
CREATE INDEX turn_inbox_received ON turn_inbox (created_at) WHERE state = 'received';`,
	// The host that received the event and runs its turn ('' for a single host). With several
	// hosts on one database, a host that stops leaves its open rows to another (Engine.Adopt).
	`ALTER TABLE turn_inbox ADD COLUMN owner TEXT NOT NULL DEFAULT '';`,
	// A queued notification's process event as data (agent.Notice, JSON): what its turn hands
	// the agent; text keeps its record for people. '' for rows of other kinds, and for
	// notification rows an older version queued (their text is all there is).
	`ALTER TABLE turn_inbox ADD COLUMN notice TEXT NOT NULL DEFAULT '';`,
}

// Inbox row states. An inbound event is received, then applied under its chat's boundary: it
// becomes done at once (a command, an observed message) or queued. A row moves queued → running → done | failed | interrupted | dropped, or
// queued → dropped; a notification row may go back from running to queued (retried later, or
// re-run after a restart). Every move is a compare-and-set on the expected state, so a turn and
// the command that interrupts it cannot both record an outcome.
const (
	stReceived    = "received" // recorded, not yet applied under the boundary
	stQueued      = "queued"
	stRunning     = "running"
	stDone        = "done"        // the turn finished; its outcome says with which answer
	stFailed      = "failed"      // the turn could not do its work (agent error, no session); the user was told
	stInterrupted = "interrupted" // a user turn stopped by /stop, /new, /reset, or a restart (outcome says which)
	stDropped     = "dropped"     // cancelled before it ran, or a notification turn not delivered (with a ledger record)
)

// Inbox row kinds.
const (
	kindMessage      = "message"
	kindNotification = "notification"
	kindRecord       = "record" // an event handled at once (observe, redact, seed): kept for dedupe
)

type inboxRow struct {
	id, plugin, profile, eventID, kind, key, text string
	eventKind                                     string // abi.Event* of an inbound event
	src                                           abi.Source
	stamp                                         session.Stamp
	notice                                        *agent.Notice // a notification's event; nil for other kinds
	state                                         string
	created                                       time.Time
}

// itemOf rebuilds the queued turn of an open row.
func (e *Engine) itemOf(r inboxRow) *item {
	it := &item{kind: r.kind, ids: []string{r.id}, plugin: r.plugin, profile: r.profile, src: r.src, texts: []string{r.text},
		msgIDs: []string{r.src.MessageID}}
	if r.kind == kindNotification {
		n := agent.Notice{Message: r.text} // a row queued by an older version holds text only
		if r.notice != nil {
			n = *r.notice
		}
		it.stamps, it.events, it.notices = []session.Stamp{r.stamp}, []string{r.eventID}, []agent.Notice{n}
	} else {
		it.cmd, it.arg = e.parseCommand(r.text)
	}
	return it
}

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// insert records an inbound event or a notification; it reports false if the event id was seen
// before (the event is a duplicate).
func (e *Engine) insert(ctx context.Context, db execer, r *inboxRow, state string) (bool, error) {
	src, err := json.Marshal(r.src)
	if err != nil {
		return false, fmt.Errorf("turn: source: %w", err)
	}
	stamp := ""
	if r.stamp.Key != "" {
		b, err := json.Marshal(r.stamp)
		if err != nil {
			return false, fmt.Errorf("turn: stamp: %w", err)
		}
		stamp = string(b)
	}
	notice := ""
	if r.notice != nil {
		b, err := json.Marshal(r.notice)
		if err != nil {
			return false, fmt.Errorf("turn: notice: %w", err)
		}
		notice = string(b)
	}
	var eventID any
	if r.eventID != "" {
		eventID = r.eventID
	}
	now := e.opt.Now().UnixMilli()
	res, err := db.ExecContext(ctx, `INSERT INTO turn_inbox
		(id, plugin, profile, event_id, kind, session_key, source, text, stamp, state, created_at, updated_at, event_kind, owner, notice)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		r.id, r.plugin, r.profile, eventID, r.kind, r.key, string(src), r.text, stamp, state, now, now, r.eventKind, e.opt.Instance, notice)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// setState moves the rows ids that this host owns and that are in one of the from states to
// state with outcome, in db (usually the transaction that records what goes with the change),
// and returns the ids that moved. The owner condition is the fence of a turn's rows: a host
// that was paused past its host lease, and whose rows another host adopted meanwhile
// (Engine.Adopt), moves none of them when it resumes.
func (e *Engine) setState(ctx context.Context, db execer, ids []string, state, outcome string, from ...string) ([]string, error) {
	var moved []string
	q := `UPDATE turn_inbox SET state = ?, outcome = ?, updated_at = ? WHERE id = ? AND owner = ? AND state IN (?` +
		strings.Repeat(", ?", len(from)-1) + `)`
	now := e.opt.Now()
	for _, id := range ids {
		args := []any{state, outcome, now.UnixMilli(), id, e.opt.Instance}
		for _, f := range from {
			args = append(args, f)
		}
		res, err := db.ExecContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("turn: inbox %s to %s: %w", id, state, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		if n == 1 {
			moved = append(moved, id)
		}
	}
	return moved, nil
}

// loadOpen returns the queued or running rows that match where (a condition on turn_inbox with
// its args), oldest first. A row that cannot be decoded is reported and marked failed, never
// run with zero values.
func (e *Engine) loadOpen(ctx context.Context, where string, args ...any) ([]inboxRow, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT id, plugin, profile, COALESCE(event_id, ''), kind, session_key, source, text, stamp, state, created_at, notice
		FROM turn_inbox WHERE state IN ('queued', 'running') AND `+where+` ORDER BY rowid`, args...)
	if err != nil {
		return nil, err
	}
	var (
		open    []inboxRow
		corrupt = map[string]string{}
	)
	for rows.Next() {
		var (
			r                  inboxRow
			src, stamp, notice string
			created            int64
		)
		if err := rows.Scan(&r.id, &r.plugin, &r.profile, &r.eventID, &r.kind, &r.key, &src, &r.text, &stamp, &r.state, &created, &notice); err != nil {
			rows.Close()
			return nil, fmt.Errorf("turn: reading the inbox: %w", err)
		}
		r.created = time.UnixMilli(created)
		if err := json.Unmarshal([]byte(src), &r.src); err != nil {
			corrupt[r.id] = "corrupt source: " + err.Error()
			continue
		}
		if stamp != "" {
			if err := json.Unmarshal([]byte(stamp), &r.stamp); err != nil {
				corrupt[r.id] = "corrupt stamp: " + err.Error()
				continue
			}
		}
		if notice != "" {
			r.notice = &agent.Notice{}
			if err := json.Unmarshal([]byte(notice), r.notice); err != nil {
				corrupt[r.id] = "corrupt notice: " + err.Error()
				continue
			}
		}
		if r.kind == kindNotification && (r.stamp.Key == "" || r.eventID == "") {
			corrupt[r.id] = "notification without its stamp or event"
			continue
		}
		open = append(open, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("turn: reading the inbox: %w", err)
	}
	if err := e.failCorrupt(ctx, corrupt, stQueued, stRunning); err != nil {
		return nil, err
	}
	return open, nil
}

// failCorrupt reports the inbox rows that cannot be decoded (id → why) and marks them failed
// from one of the from states: never run with zero values, never left open.
func (e *Engine) failCorrupt(ctx context.Context, corrupt map[string]string, from ...string) error {
	for id, why := range corrupt {
		e.log.Error("turn: inbox row cannot be decoded; marked failed", "id", id, "error", why)
		if _, err := e.setState(ctx, e.db, []string{id}, stFailed, why, from...); err != nil {
			return err
		}
	}
	return nil
}

// loadReceived returns the inbound events recorded but not applied that match where, in the
// order they arrived. A row that cannot be decoded is reported and marked failed.
func (e *Engine) loadReceived(ctx context.Context, where string, args ...any) ([]*inboxRow, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT id, plugin, profile, COALESCE(event_id, ''), kind, session_key, source, text, event_kind
		FROM turn_inbox WHERE state = 'received' AND `+where+` ORDER BY rowid`, args...)
	if err != nil {
		return nil, err
	}
	var (
		out     []*inboxRow
		corrupt = map[string]string{}
	)
	for rows.Next() {
		r := &inboxRow{}
		var src string
		if err := rows.Scan(&r.id, &r.plugin, &r.profile, &r.eventID, &r.kind, &r.key, &src, &r.text, &r.eventKind); err != nil {
			rows.Close()
			return nil, fmt.Errorf("turn: reading the inbox: %w", err)
		}
		if err := json.Unmarshal([]byte(src), &r.src); err != nil {
			corrupt[r.id] = "corrupt source: " + err.Error()
			continue
		}
		out = append(out, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("turn: reading the inbox: %w", err)
	}
	if err := e.failCorrupt(ctx, corrupt, stReceived); err != nil {
		return nil, err
	}
	return out, nil
}
