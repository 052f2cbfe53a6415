package turn

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hermes-host/hermes-host/abi"
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
}

// Inbox row states.
const (
	stReceived    = "received" // recorded, not yet applied under the boundary
	stQueued      = "queued"
	stRunning     = "running"
	stDone        = "done"
	stDropped     = "dropped"
	stInterrupted = "interrupted"
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
	created                                       time.Time
}

// insert records an inbound event or a notification; it reports false if the event id was seen
// before (the event is a duplicate).
func (e *Engine) insert(ctx context.Context, r *inboxRow, state string) (bool, error) {
	src, _ := json.Marshal(r.src)
	stamp := ""
	if r.stamp.Key != "" {
		b, _ := json.Marshal(r.stamp)
		stamp = string(b)
	}
	var eventID any
	if r.eventID != "" {
		eventID = r.eventID
	}
	now := e.opt.Now().UnixMilli()
	res, err := e.db.ExecContext(ctx, `INSERT OR IGNORE INTO turn_inbox
		(id, plugin, profile, event_id, kind, session_key, source, text, stamp, state, created_at, updated_at, event_kind)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.id, r.plugin, r.profile, eventID, r.kind, r.key, string(src), r.text, stamp, state, now, now, r.eventKind)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (e *Engine) setState(ctx context.Context, ids []string, state, outcome string) {
	ctx = context.WithoutCancel(ctx)
	for _, id := range ids {
		if _, err := e.db.ExecContext(ctx, `UPDATE turn_inbox SET state = ?, outcome = ?, updated_at = ? WHERE id = ?`,
			state, outcome, e.opt.Now().UnixMilli(), id); err != nil {
			e.log.Error("turn: recording inbox state failed", "id", id, "state", state, "error", err)
		}
	}
}

func (e *Engine) loadOpen(ctx context.Context) ([]inboxRow, []inboxRow, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT id, plugin, profile, COALESCE(event_id, ''), kind, session_key, source, text, stamp, state, created_at
		FROM turn_inbox WHERE state IN ('queued', 'running') ORDER BY rowid`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var queued, running []inboxRow
	for rows.Next() {
		var (
			r          inboxRow
			src, stamp string
			state      string
			created    int64
		)
		if err := rows.Scan(&r.id, &r.plugin, &r.profile, &r.eventID, &r.kind, &r.key, &src, &r.text, &stamp, &state, &created); err != nil {
			return nil, nil, err
		}
		json.Unmarshal([]byte(src), &r.src)
		if stamp != "" {
			json.Unmarshal([]byte(stamp), &r.stamp)
		}
		r.created = time.UnixMilli(created)
		if state == stRunning {
			running = append(running, r)
		} else {
			queued = append(queued, r)
		}
	}
	return queued, running, rows.Err()
}

// loadReceived returns the inbound events recorded but not applied when the host stopped, in
// the order they arrived.
func (e *Engine) loadReceived(ctx context.Context) ([]*inboxRow, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT id, plugin, profile, COALESCE(event_id, ''), kind, session_key, source, text, event_kind
		FROM turn_inbox WHERE state = 'received' ORDER BY rowid`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*inboxRow
	for rows.Next() {
		r := &inboxRow{}
		var src string
		if err := rows.Scan(&r.id, &r.plugin, &r.profile, &r.eventID, &r.kind, &r.key, &src, &r.text, &r.eventKind); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(src), &r.src); err != nil {
			return nil, fmt.Errorf("inbox row %s: source: %w", r.id, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
