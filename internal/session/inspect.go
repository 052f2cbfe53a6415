package session

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
)

// KeyInfo is one line of `hermes-host sessions ls`: a key and its current session.
type KeyInfo struct {
	Key        string    `json:"key"`
	SessionID  string    `json:"session_id"`
	Generation int64     `json:"generation"`
	Suspended  bool      `json:"suspended,omitempty"`
	UpdatedAt  time.Time `json:"updated_at"` // last user activity
	StartedAt  time.Time `json:"started_at"` // of the current session
	Title      string    `json:"title,omitempty"`
	EndReason  string    `json:"end_reason,omitempty"` // set if the routed session has ended (awaiting repair)
	Ended      bool      `json:"ended,omitempty"`
}

// SessionInfo describes one physical session.
type SessionInfo struct {
	ID           string     `json:"id"`
	Key          string     `json:"key"`
	ParentID     string     `json:"parent_session_id,omitempty"`
	BranchedFrom string     `json:"branched_from,omitempty"`
	CreatedBy    string     `json:"created_by"` // new, reset, compression, branch, replace
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	EndReason    string     `json:"end_reason,omitempty"`
	Title        string     `json:"title,omitempty"`
	Origin       abi.Source `json:"origin"`
	Messages     int        `json:"messages"`
	// Model is the model the chat chose for this conversation (/model); "": the configured one.
	Model string `json:"model,omitempty"`
	// PromptTokens, CompletionTokens and ModelCalls add up the usage the model server
	// reported for this session's turns (/usage).
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	ModelCalls       int64 `json:"model_calls,omitempty"`
}

// Live reports whether the session has not ended.
func (s SessionInfo) Live() bool { return s.EndedAt == nil }

// SessionView is `hermes-host sessions show KEY|ID`.
type SessionView struct {
	Key        string       `json:"key"`
	Generation int64        `json:"generation"`
	Suspended  bool         `json:"suspended,omitempty"`
	Current    *SessionInfo `json:"current,omitempty"` // the key's routed session (nil: no route)
	Focus      SessionInfo  `json:"focus"`             // the session asked for (the current one for a key)
	// Ancestors are Focus's parents, nearest first (at most 50).
	Ancestors []SessionInfo `json:"ancestors,omitempty"`
	// Continuations are Focus's compression continuations in order, ending at its tip.
	Continuations []SessionInfo `json:"continuations,omitempty"`
	Tail          []Message     `json:"tail,omitempty"` // the last messages of Focus
}

// List returns every key whose name starts with prefix (all keys for ""), in key order, with
// its current session.
func (k *Kernel) List(ctx context.Context, prefix string) ([]KeyInfo, error) {
	return k.keys(ctx, KeyFilter{Prefix: prefix}, ` ORDER BY `+k.bytewise("r.session_key"))
}

// KeyFilter selects and pages the keys Keys returns.
type KeyFilter struct {
	Prefix string // keys that start with it ("": all)
	Search string // keys or current sessions' titles that hold it, case-insensitive
	Offset int    // keys to skip (the pages before)
	Limit  int    // at most this many (default 100, at most MaxKeys)
}

// MaxKeys caps KeyFilter.Limit.
const MaxKeys = 1000

// Keys returns the keys f selects, most recently active first, one page of them.
func (k *Kernel) Keys(ctx context.Context, f KeyFilter) ([]KeyInfo, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit, f.Offset = min(f.Limit, MaxKeys), max(f.Offset, 0)
	return k.keys(ctx, f, ` ORDER BY r.updated_at DESC, `+k.bytewise("r.session_key")+
		` LIMIT `+strconv.Itoa(f.Limit)+` OFFSET `+strconv.Itoa(f.Offset))
}

func (k *Kernel) keys(ctx context.Context, f KeyFilter, order string) ([]KeyInfo, error) {
	q := `SELECT r.session_key, r.session_id, r.generation, r.suspended, r.updated_at,
		COALESCE(s.started_at, 0), COALESCE(s.title, ''), s.ended_at IS NOT NULL, COALESCE(s.end_reason, '')
		FROM session_routes r LEFT JOIN sessions s ON s.id = r.session_id`
	var args store.Args
	var where []string
	if f.Prefix != "" {
		where = append(where, k.bytewise("r.session_key")+` >= `+args.Add(f.Prefix))
		if hi, ok := prefixEnd(f.Prefix); ok {
			where = append(where, k.bytewise("r.session_key")+` < `+args.Add(hi))
		}
	}
	if f.Search != "" {
		// Substring tests with replace: instr and strpos differ between the backends.
		s := args.Add(strings.ToLower(f.Search))
		where = append(where, `(replace(lower(r.session_key), `+s+`, '') <> lower(r.session_key) OR `+
			`replace(lower(COALESCE(s.title, '')), `+s+`, '') <> lower(COALESCE(s.title, '')))`)
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := k.db.QueryContext(ctx, q+order, args...)
	if err != nil {
		return nil, fmt.Errorf("session: list: %w", err)
	}
	defer rows.Close()
	var out []KeyInfo
	for rows.Next() {
		var ki KeyInfo
		var upd, started int64
		if err := rows.Scan(&ki.Key, &ki.SessionID, &ki.Generation, &ki.Suspended, &upd, &started,
			&ki.Title, &ki.Ended, &ki.EndReason); err != nil {
			return nil, err
		}
		ki.UpdatedAt, ki.StartedAt = time.UnixMilli(upd), time.UnixMilli(started)
		out = append(out, ki)
	}
	return out, rows.Err()
}

// prefixEnd returns the smallest string greater than every string with prefix p.
func prefixEnd(p string) (string, bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// Session returns one session row.
func (k *Kernel) Session(ctx context.Context, id string) (SessionInfo, error) {
	var s SessionInfo
	var parent, branched, reason, title, model sql.NullString
	var started int64
	var ended sql.NullInt64
	var origin string
	err := k.db.QueryRowContext(ctx, `SELECT id, session_key, parent_session_id, branched_from, created_by,
		started_at, ended_at, end_reason, title, origin,
		(SELECT COUNT(*) FROM session_messages m WHERE m.session_id = sessions.id),
		model, prompt_tokens, completion_tokens, model_calls
		FROM sessions WHERE id = $1`, id).Scan(&s.ID, &s.Key, &parent, &branched, &s.CreatedBy,
		&started, &ended, &reason, &title, &origin, &s.Messages, &model, &s.PromptTokens, &s.CompletionTokens, &s.ModelCalls)
	if errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return s, fmt.Errorf("session: load %s: %w", id, err)
	}
	s.ParentID, s.BranchedFrom, s.EndReason, s.Title, s.Model = parent.String, branched.String, reason.String, title.String, model.String
	s.StartedAt = time.UnixMilli(started)
	if ended.Valid {
		t := time.UnixMilli(ended.Int64)
		s.EndedAt = &t
	}
	if err := json.Unmarshal([]byte(origin), &s.Origin); err != nil {
		return s, fmt.Errorf("session: %s: corrupt origin: %w", id, err)
	}
	return s, nil
}

// RouteSource returns the source to answer on for key: the origin stored with its current
// session (the chat, thread and user of the conversation, never those of whatever message is
// in hand), or, for a key with no session, the fields parsed from the key.
func (k *Kernel) RouteSource(ctx context.Context, key string) (abi.Source, error) {
	r, ok, err := k.Current(ctx, key)
	if err != nil {
		return abi.Source{}, err
	}
	if ok {
		s, err := k.Session(ctx, r.SessionID)
		if err != nil {
			return abi.Source{}, err
		}
		return s.Origin, nil
	}
	pk, err := k.ParseKey(key)
	if err != nil {
		return abi.Source{}, err
	}
	return pk.Source(), nil
}

// Show describes a key (given a key) or a session (given a session id): the key's current
// session and generation, the focus session's ancestors and compression continuations, and the
// last tail messages of the focus (20 if tail <= 0).
func (k *Kernel) Show(ctx context.Context, keyOrID string, tail int) (*SessionView, error) {
	if tail <= 0 {
		tail = 20
	}
	v := &SessionView{}
	var focusID string
	if ValidSessionID(keyOrID) {
		focusID = keyOrID
		s, err := k.Session(ctx, focusID)
		if err != nil {
			return nil, err
		}
		v.Key = s.Key
	} else {
		v.Key = keyOrID
	}
	st, err := k.loadRoute(ctx, v.Key)
	if err != nil {
		return nil, err
	}
	if st.exists {
		v.Generation, v.Suspended = st.gen, st.suspended
		cur, err := k.Session(ctx, st.sid)
		if err != nil {
			return nil, err
		}
		v.Current = &cur
		if focusID == "" {
			focusID = st.sid
		}
	}
	if focusID == "" {
		return nil, fmt.Errorf("%w: no key or session %q", ErrNotFound, keyOrID)
	}
	if v.Focus, err = k.Session(ctx, focusID); err != nil {
		return nil, err
	}
	seen := map[string]bool{focusID: true}
	for p := v.Focus.ParentID; p != "" && len(v.Ancestors) < 50 && !seen[p]; {
		seen[p] = true
		s, err := k.Session(ctx, p)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		v.Ancestors = append(v.Ancestors, s)
		p = s.ParentID
	}
	r := rowState{id: focusID, key: v.Key, exists: true, ended: v.Focus.EndedAt != nil, reason: v.Focus.EndReason}
	for hops := 0; r.ended && r.reason == EndCompression && hops < k.opt.MaxTipHops; hops++ {
		c := rowState{key: r.key, exists: true}
		err := k.stChild.QueryRowContext(ctx, r.id).Scan(&c.id, &c.ended, &c.reason)
		if errors.Is(err, sql.ErrNoRows) || seen[c.id] {
			break
		}
		if err != nil {
			return nil, err
		}
		seen[c.id] = true
		s, err := k.Session(ctx, c.id)
		if err != nil {
			return nil, err
		}
		v.Continuations = append(v.Continuations, s)
		r = c
	}
	if v.Tail, err = k.Transcript(ctx, focusID, tail); err != nil {
		return nil, err
	}
	return v, nil
}

// ChatKey is one session key of a chat: taken apart, and with its current session.
type ChatKey struct {
	Parsed Key
	Info   KeyInfo
}

// ChatKeys lists the keys of one chat of platform for profile, whatever their chat type,
// workspace, thread or participant: what the host knows of a chat given only by its id (a
// scheduled job's target). A chat that continues another (an alias) is found under the old id
// its keys use.
func (k *Kernel) ChatKeys(ctx context.Context, platform, profile, chatID string) ([]ChatKey, error) {
	ns, err := k.opt.Keys.namespace(profile)
	if err != nil {
		return nil, err
	}
	chatID = k.aliased(abi.Source{Platform: platform, Profile: profile, ChatID: chatID}).ChatID
	infos, err := k.List(ctx, keyPrefix+":"+ns+":"+platform+":")
	if err != nil {
		return nil, err
	}
	var out []ChatKey
	for _, ki := range infos {
		key, err := k.ParseKey(ki.Key)
		if err == nil && key.Platform == platform && key.ChatID == chatID {
			out = append(out, ChatKey{Parsed: key, Info: ki})
		}
	}
	return out, nil
}

// Scoped reports whether platform's keys carry a workspace (Source.ScopeID) before the chat id.
func (k *Kernel) Scoped(platform string) bool { return k.opt.Keys.scoped(platform) }
