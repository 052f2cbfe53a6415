package session

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Message is one transcript entry.
type Message struct {
	Seq               int64     `json:"seq"` // global append order
	SessionID         string    `json:"session_id"`
	Role              string    `json:"role"` // user, assistant, system, notification…; default user
	Text              string    `json:"text"` // empty once redacted
	PlatformMessageID string    `json:"platform_message_id,omitempty"`
	At                time.Time `json:"at"`
	Redacted          bool      `json:"redacted,omitempty"`
	CopiedFrom        int64     `json:"copied_from,omitempty"` // seq of the original, for a /branch copy
	// Turn names the turn the message belongs to (its question, its answer, its tool calls);
	// empty for messages outside turns.
	Turn string `json:"turn,omitempty"`
	// Meta is the agent's structured part of the message (JSON: tool calls, tool call ids);
	// opaque to the session kernel.
	Meta string `json:"meta,omitempty"`
}

// Append adds m to the transcript of sessionID, which must be a session of this key, and
// returns its sequence number. It does not decide where a message belongs: a delivery appends
// to the SessionID of a deliverable Verdict, a turn to the session it runs in.
func (b *Boundary) Append(sessionID string, m Message) (int64, error) {
	if err := b.check(); err != nil {
		return 0, err
	}
	if m.Role == "" {
		m.Role = "user"
	}
	at := m.At
	if at.IsZero() {
		at = b.k.now()
	}
	// RETURNING gives the new row's seq on both backends (SQLite 3.35+, PostgreSQL); no row
	// means the session is not one of this key's.
	var seq int64
	err := b.k.db.QueryRowContext(b.ctx, `INSERT INTO session_messages
		(session_id, role, text, platform_message_id, created_at, turn_id, meta)
		SELECT id, $1, $2, $3, $4, $5, $6 FROM sessions WHERE id = $7 AND session_key = $8
		RETURNING seq`,
		m.Role, m.Text, nullStr(m.PlatformMessageID), at.UnixMilli(), nullStr(m.Turn), nullStr(m.Meta), sessionID, b.key).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s in %s", ErrNotFound, sessionID, b.key)
	}
	if err != nil {
		return 0, fmt.Errorf("session: append to %s: %w", sessionID, err)
	}
	return seq, nil
}

// Redact blanks every copy of the message with platformMessageID in this key's sessions (the
// original and /branch copies) and reports whether any was found.
func (b *Boundary) Redact(platformMessageID string) (bool, error) {
	if err := b.check(); err != nil {
		return false, err
	}
	if platformMessageID == "" {
		return false, nil
	}
	res, err := b.k.db.ExecContext(b.ctx, `UPDATE session_messages SET text = '', redacted_at = $1
		WHERE platform_message_id = $2 AND redacted_at IS NULL
		AND session_id IN (SELECT id FROM sessions WHERE session_key = $3)`,
		b.k.now().UnixMilli(), platformMessageID, b.key)
	if err != nil {
		return false, fmt.Errorf("session: redact in %s: %w", b.key, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Redact runs Boundary.Redact in key's boundary.
func (k *Kernel) Redact(ctx context.Context, key, platformMessageID string) (bool, error) {
	var ok bool
	err := k.WithBoundary(ctx, key, func(b *Boundary) error {
		var err error
		ok, err = b.Redact(platformMessageID)
		return err
	})
	return ok, err
}

// Transcript returns the last limit messages of session id in order (all of them if limit <= 0).
func (k *Kernel) Transcript(ctx context.Context, id string, limit int) ([]Message, error) {
	const cols = `SELECT seq, role, text, COALESCE(platform_message_id, ''),
		created_at, redacted_at IS NOT NULL, COALESCE(copied_from, 0), COALESCE(turn_id, ''), COALESCE(meta, '')`
	var (
		rows *sql.Rows
		err  error
	)
	if limit <= 0 {
		rows, err = k.db.QueryContext(ctx, cols+` FROM session_messages WHERE session_id = $1 ORDER BY seq`, id)
	} else {
		rows, err = k.db.QueryContext(ctx, cols+` FROM (SELECT * FROM session_messages WHERE session_id = $1
			ORDER BY seq DESC LIMIT $2) AS tail ORDER BY seq`, id, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("session: transcript of %s: %w", id, err)
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		m := Message{SessionID: id}
		var at int64
		if err := rows.Scan(&m.Seq, &m.Role, &m.Text, &m.PlatformMessageID, &at, &m.Redacted, &m.CopiedFrom, &m.Turn, &m.Meta); err != nil {
			return nil, err
		}
		m.At = time.UnixMilli(at)
		out = append(out, m)
	}
	return out, rows.Err()
}
