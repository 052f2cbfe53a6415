package session

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
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

// What counts as a later entry quoting a recalled text: its words, whitespace aside (an answer
// reflows it: the built-in agent's echo, a summary, a model), and only the first quotePrefix
// characters of a longer text (a quote may be clipped: the echo keeps 200, a /compress summary
// 120). A text of fewer than minQuote characters ("ok", "ps") is too common to tell a quote from
// a coincidence and is not looked for.
const (
	minQuote    = 8
	quotePrefix = 64
)

// quoteNeedle is what an entry quoting text contains (normalized by words), or "" for a text too
// short to look for.
func quoteNeedle(text string) string {
	q := []rune(words(text))
	if len(q) < minQuote {
		return ""
	}
	return string(q[:min(len(q), quotePrefix)])
}

// words is s with each run of white space made one space, trimmed.
func words(s string) string { return strings.Join(strings.Fields(s), " ") }

// Redact blanks every copy of the message with platformMessageID in this key's sessions (the
// original and /branch copies) and reports whether any was found. It blanks, in the same
// transaction, what would show the agent the recalled text next turn: the entries of the turn it
// asked, other than that turn's other questions (its answer, tool calls and results), and every
// later entry of the key's sessions that quotes the text (an answer, a notice, a summary, another
// user; see quoteNeedle). "Later" is by the entry's original: a /branch copy of what was said
// before the message is not a quote of it, although the copy was written after.
func (b *Boundary) Redact(platformMessageID string) (bool, error) {
	if err := b.check(); err != nil {
		return false, err
	}
	if platformMessageID == "" {
		return false, nil
	}
	const inKey = ` session_id IN (SELECT id FROM sessions WHERE session_key = $2)` // the key is each query's second argument
	found := false
	err := b.tx(func(tx *store.Tx) error {
		rows, err := tx.QueryContext(b.ctx, `SELECT seq, text, COALESCE(turn_id, '') FROM session_messages
			WHERE platform_message_id = $1 AND redacted_at IS NULL AND`+inKey, platformMessageID, b.key)
		if err != nil {
			return err
		}
		var blank []int64
		var quotes []string
		turns := map[string]bool{}
		first := int64(-1)
		for rows.Next() {
			var seq int64
			var text, turn string
			if err := rows.Scan(&seq, &text, &turn); err != nil {
				rows.Close()
				return err
			}
			blank = append(blank, seq)
			if first < 0 || seq < first {
				first = seq
			}
			if q := quoteNeedle(text); q != "" && !slices.Contains(quotes, q) {
				quotes = append(quotes, q)
			}
			if turn != "" {
				turns[turn] = true
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if found = len(blank) > 0; !found {
			return nil
		}
		// Every entry of the key written after the message, with its original's seq: a copy
		// points at what it copied, which has a smaller seq, so in seq order the original of each
		// is known when it is read (one copied from before the message is before it whatever its
		// lineage). first is the message's original: a message is appended before it is copied.
		rows, err = tx.QueryContext(b.ctx, `SELECT seq, COALESCE(copied_from, 0), role, text, COALESCE(turn_id, ''),
			redacted_at IS NOT NULL FROM session_messages WHERE seq > $1 AND`+inKey+` ORDER BY seq`, first, b.key)
		if err != nil {
			return err
		}
		origin := map[int64]int64{}
		for rows.Next() {
			var seq, from int64
			var role, text, turn string
			var redacted bool
			if err := rows.Scan(&seq, &from, &role, &text, &turn, &redacted); err != nil {
				rows.Close()
				return err
			}
			o := seq
			if from != 0 {
				if o = from; origin[from] != 0 {
					o = origin[from]
				}
			}
			origin[seq] = o
			if redacted || o <= first {
				continue
			}
			answers := turn != "" && turns[turn] && role != "user"
			if answers || slices.ContainsFunc(quotes, func(q string) bool { return strings.Contains(words(text), q) }) {
				blank = append(blank, seq)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		now := b.k.now().UnixMilli()
		for _, seq := range blank {
			if _, err := tx.ExecContext(b.ctx, `UPDATE session_messages SET text = '', redacted_at = $1 WHERE seq = $2`, now, seq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("session: redact in %s: %w", b.key, err)
	}
	return found, nil
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
