package auth

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Verdicts of operator actions in the auth log.
const (
	Approved = "approved"
	Revoked  = "revoked"
)

// Entry is one row of the auth log: a refused (or observed-only) inbound event, or an operator's
// approval or revocation.
type Entry struct {
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`
	Plugin   string    `json:"plugin"`
	Profile  string    `json:"profile"`
	EventID  string    `json:"event_id,omitempty"`
	Kind     string    `json:"kind"`
	ChatType string    `json:"chat_type,omitempty"`
	ChatID   string    `json:"chat_id,omitempty"`
	UserID   string    `json:"user_id,omitempty"`
	UserName string    `json:"user_name,omitempty"`
	Verdict  string    `json:"verdict"` // Refuse, Observe, Approved or Revoked
	Reason   string    `json:"reason"`
	Detail   string    `json:"detail,omitempty"` // the pairing code sent, the delivery id…
	Text     string    `json:"text,omitempty"`   // the start of the refused message
}

// logTextChars is how much of a refused message the log keeps: enough to see what was tried.
const logTextChars = 200

// MaxList bounds one read of the auth log.
const MaxList = 1000

// insertLog writes a log row inside tx; false when ev's id is already logged (a replay).
func (g *Gate) insertLog(ctx context.Context, tx *sql.Tx, plugin, profile string, ev abi.InboundEvent, verdict, reason, detail string) (bool, error) {
	var id any
	if ev.ID != "" {
		id = ev.ID
	}
	kind := ev.Kind
	if kind == "" {
		kind = abi.EventMessage
	}
	src := ev.Source
	// A replay of a logged event id inserts nothing and returns no row.
	var seq int64
	err := tx.QueryRowContext(ctx, `INSERT INTO auth_log
		(at, plugin, profile, event_id, kind, chat_type, chat_id, user_id, user_name, verdict, reason, detail, text)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
		ON CONFLICT DO NOTHING RETURNING seq`,
		g.opt.Now().UnixMilli(), plugin, profile, id, kind, src.ChatType, src.ChatID, src.UserID, src.UserName,
		verdict, reason, detail, clip(ev.Text, logTextChars)).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// Keep the log bounded; checking every 64th row keeps the cost out of the common path.
	if seq%64 == 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM auth_log WHERE seq <= $1`, seq-int64(g.opt.LogRows)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// setDetail updates the detail of ev's log row (what became of its pairing message).
func (g *Gate) setDetail(ctx context.Context, plugin, profile, eventID, detail string) {
	if eventID == "" {
		return
	}
	if _, err := g.db.ExecContext(context.WithoutCancel(ctx), `UPDATE auth_log SET detail = $1 WHERE plugin = $2 AND profile = $3 AND event_id = $4`,
		detail, plugin, profile, eventID); err != nil {
		g.log.Error("auth: updating the log failed", "error", err)
	}
}

// operatorLog records an approval or revocation.
func operatorLog(ctx context.Context, tx *sql.Tx, now time.Time, a Approval, verdict, detail string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO auth_log (at, plugin, profile, kind, user_id, user_name, verdict, reason, detail)
		VALUES ($1, $2, $3, 'operator', $4, $5, $6, 'operator', $7)`, now.UnixMilli(), a.Plugin, a.Profile, a.UserID, a.UserName, verdict, detail)
	return err
}

// LogFilter selects auth log rows.
type LogFilter struct {
	Plugin string
	Limit  int // newest first; default 50, at most MaxList
}

// ListLog returns auth log rows, newest first. It reads the database directly, so the CLI can
// use it beside a serving host.
func ListLog(ctx context.Context, db *sql.DB, f LogFilter) ([]Entry, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, MaxList)
	q := `SELECT seq, at, plugin, profile, COALESCE(event_id, ''), kind, chat_type, chat_id, user_id, user_name,
		verdict, reason, detail, text FROM auth_log`
	var args store.Args
	if f.Plugin != "" {
		q += ` WHERE plugin = ` + args.Add(f.Plugin)
	}
	q += ` ORDER BY seq DESC LIMIT ` + args.Add(f.Limit)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Entry{}
	for rows.Next() {
		var e Entry
		var at int64
		if err := rows.Scan(&e.Seq, &at, &e.Plugin, &e.Profile, &e.EventID, &e.Kind, &e.ChatType, &e.ChatID, &e.UserID,
			&e.UserName, &e.Verdict, &e.Reason, &e.Detail, &e.Text); err != nil {
			return nil, err
		}
		e.At = time.UnixMilli(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// clip keeps the first n characters of s.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return strings.ToValidUTF8(s, "�")
}

// Log lists auth log rows, newest first.
func (g *Gate) Log(ctx context.Context, f LogFilter) ([]Entry, error) { return ListLog(ctx, g.db, f) }
