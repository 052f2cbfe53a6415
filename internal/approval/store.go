package approval

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// States of a request. Only pending changes, once, to one of the others.
const (
	StatePending  = "pending"
	StateApproved = "approved"
	StateDenied   = "denied"  // by a person, or by the host without asking (a notification turn)
	StateExpired  = "expired" // no answer within the policy's timeout: denied
	StateVoided   = "voided"  // the conversation moved on (/new, /reset, /stop) or the turn ended
)

// Errors of Decide.
var (
	ErrNotFound = errors.New("no such approval request")
	ErrNotYours = errors.New("only the user who asked, or an approver the operator lists, may answer this request")
	ErrSettled  = errors.New("this request has been answered already")
)

// Request is what a turn asks approval for.
type Request struct {
	Key, SessionID  string // the conversation that asks
	Generation      int64  // the key's generation when the turn started
	Plugin, Profile string // the platform plugin and profile of the chat
	Platform        string // the requester's platform (Source.Platform)
	User, UserName  string // the requester
	Command, Rule   string // what would run, and the rule it matched
	Turn            string // the turn's first inbox row
}

// Record is a request and what became of it.
type Record struct {
	ID         string    `json:"id"`
	Key        string    `json:"session_key"`
	SessionID  string    `json:"session_id"`
	Generation int64     `json:"generation"`
	Plugin     string    `json:"plugin"`
	Profile    string    `json:"profile"`
	Platform   string    `json:"platform"`
	User       string    `json:"user"`
	UserName   string    `json:"user_name,omitempty"`
	Command    string    `json:"command"`
	Rule       string    `json:"rule"`
	Turn       string    `json:"turn,omitempty"`
	State      string    `json:"state"`
	Reason     string    `json:"reason,omitempty"`
	DecidedBy  string    `json:"decided_by,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	DecidedAt  time.Time `json:"decided_at,omitzero"`
}

// Requester is how a record names its requester: "platform:user_id".
func (r Record) Requester() string { return r.Platform + ":" + r.User }

// The schema is one text for both dialects (BIGINT has SQLite's integer affinity).
var migrations = []store.Migration{store.Same(`CREATE TABLE approvals (
	id          TEXT PRIMARY KEY,
	session_key TEXT NOT NULL,
	session_id  TEXT NOT NULL,
	generation  BIGINT NOT NULL,
	plugin      TEXT NOT NULL,
	profile     TEXT NOT NULL,
	platform    TEXT NOT NULL,
	user_id     TEXT NOT NULL,
	user_name   TEXT NOT NULL,
	command     TEXT NOT NULL,
	rule        TEXT NOT NULL,
	turn        TEXT NOT NULL,
	state       TEXT NOT NULL,
	reason      TEXT NOT NULL,
	decided_by  TEXT NOT NULL,
	owner       TEXT NOT NULL,
	created_at  BIGINT NOT NULL,
	expires_at  BIGINT NOT NULL,
	decided_at  BIGINT NOT NULL
);
CREATE INDEX approvals_key ON approvals (session_key, created_at);
CREATE INDEX approvals_pending ON approvals (owner) WHERE state = 'pending';`)}

// Options configure a Store.
type Options struct {
	Policy   *Policy // the timeout and the approvers; nil: DefaultTimeout and none
	Instance string  // this host's id (several hosts on one database), "" alone
	Logger   *slog.Logger
	Now      func() time.Time // tests
	// Poll is how often a waiting request looks for an answer recorded by another host
	// (default 500ms); an answer recorded by this host wakes it at once.
	Poll time.Duration
}

// Store records requests and their decisions, and wakes the turn that waits on one.
//
// Lock discipline: mu guards waiters only and is a leaf (nothing is called while it is held).
// A request's state changes only by a compare-and-set from pending in the database, so two
// answers (a press and a /new, two hosts) settle it once, whichever comes first.
type Store struct {
	db  *sql.DB
	opt Options

	mu      sync.Mutex
	waiters map[string]chan struct{} // request id → closed when its row may have changed
}

// Open migrates the approvals table. Requests this host left pending when it stopped are
// voided (their turns did not survive it), and anyone's pending past its expiry is expired.
func Open(ctx context.Context, db *sql.DB, opt Options) (*Store, error) {
	if err := store.Migrate(ctx, db, "approval", migrations); err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Poll <= 0 {
		opt.Poll = 500 * time.Millisecond
	}
	s := &Store{db: db, opt: opt, waiters: map[string]chan struct{}{}}
	now := s.now()
	if _, err := db.ExecContext(ctx, `UPDATE approvals SET state = $1, reason = $2, decided_at = $3
		WHERE state = $4 AND owner = $5`, StateVoided, "the host restarted while the request waited", now, StatePending, opt.Instance); err != nil {
		return nil, fmt.Errorf("approval: voiding the requests of the last run: %w", err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE approvals SET state = $1, reason = $2, decided_at = $3
		WHERE state = $4 AND expires_at < $3`, StateExpired, "no answer in time", now, StatePending); err != nil {
		return nil, fmt.Errorf("approval: expiring old requests: %w", err)
	}
	return s, nil
}

func (s *Store) now() int64 { return s.opt.Now().UnixMilli() }

func (s *Store) timeout() time.Duration {
	if s.opt.Policy == nil {
		return DefaultTimeout
	}
	return s.opt.Policy.Timeout
}

// newID is a request's id: short enough to type after /approve.
func newID() string {
	const digits = "abcdefghjkmnpqrstuvwxyz23456789"
	var b [8]byte
	rand.Read(b[:])
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	return "ap" + string(b[:])
}

// Ask records a pending request. The caller shows it to the requester, then waits with Wait.
func (s *Store) Ask(ctx context.Context, req Request) (Record, error) {
	rec := s.record(req, StatePending, "")
	if err := s.insert(ctx, rec); err != nil {
		return Record{}, err
	}
	return rec, nil
}

// Refuse records a request the host denied without asking (reason says why): a notification
// turn's dangerous command.
func (s *Store) Refuse(ctx context.Context, req Request, reason string) (Record, error) {
	rec := s.record(req, StateDenied, reason)
	rec.DecidedBy, rec.DecidedAt = "host", rec.CreatedAt
	return rec, s.insert(ctx, rec)
}

func (s *Store) record(req Request, state, reason string) Record {
	now := time.UnixMilli(s.now())
	return Record{ID: newID(), Key: req.Key, SessionID: req.SessionID, Generation: req.Generation, Plugin: req.Plugin,
		Profile: req.Profile, Platform: req.Platform, User: req.User, UserName: req.UserName, Command: req.Command,
		Rule: req.Rule, Turn: req.Turn, State: state, Reason: reason, CreatedAt: now, ExpiresAt: now.Add(s.timeout())}
}

func (s *Store) insert(ctx context.Context, r Record) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO approvals (id, session_key, session_id, generation, plugin, profile,
		platform, user_id, user_name, command, rule, turn, state, reason, decided_by, owner, created_at, expires_at, decided_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`,
		r.ID, r.Key, r.SessionID, r.Generation, r.Plugin, r.Profile, r.Platform, r.User, r.UserName, r.Command, r.Rule,
		r.Turn, r.State, r.Reason, r.DecidedBy, s.opt.Instance, r.CreatedAt.UnixMilli(), r.ExpiresAt.UnixMilli(), millis(r.DecidedAt))
	if err != nil {
		return fmt.Errorf("approval: recording the request: %w", err)
	}
	return nil
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Wait waits until request id is answered and returns its record: approved, denied, expired
// (no answer by its expiry: Wait records that), or voided (by /new and the like, or because
// ctx ended first: Wait records that too, with context.Cause as the reason). An answer recorded
// by another host is found within Options.Poll.
func (s *Store) Wait(ctx context.Context, id string) (Record, error) {
	for {
		wake := s.watch(id)
		rec, err := s.Get(context.WithoutCancel(ctx), id)
		if err != nil {
			s.unwatch(id)
			return Record{}, err
		}
		if rec.State != StatePending {
			s.unwatch(id)
			return rec, nil
		}
		left := rec.ExpiresAt.Sub(s.opt.Now())
		if left <= 0 {
			s.unwatch(id)
			return s.settle(context.WithoutCancel(ctx), id, StateExpired, "no answer within "+s.timeout().String(), "")
		}
		timer := time.NewTimer(min(left, s.opt.Poll))
		select {
		case <-ctx.Done():
			timer.Stop()
			s.unwatch(id)
			return s.settle(context.WithoutCancel(ctx), id, StateVoided, "the turn ended first: "+context.Cause(ctx).Error(), "")
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// watch returns the channel that is closed when id's row may have changed on this host.
func (s *Store) watch(id string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.waiters[id]
	if ch == nil {
		ch = make(chan struct{})
		s.waiters[id] = ch
	}
	return ch
}

func (s *Store) unwatch(id string) {
	s.mu.Lock()
	delete(s.waiters, id)
	s.mu.Unlock()
}

// wake tells the waiters of ids that their rows may have changed.
func (s *Store) wake(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if ch := s.waiters[id]; ch != nil {
			close(ch)
			delete(s.waiters, id)
		}
	}
}

// settle moves id from pending to state and returns its record, whatever answer came first.
func (s *Store) settle(ctx context.Context, id, state, reason, by string) (Record, error) {
	if _, err := s.db.ExecContext(ctx, `UPDATE approvals SET state = $1, reason = $2, decided_by = $3, decided_at = $4
		WHERE id = $5 AND state = $6`, state, reason, by, s.now(), id, StatePending); err != nil {
		return Record{}, fmt.Errorf("approval: recording the answer: %w", err)
	}
	s.wake(id)
	return s.Get(ctx, id)
}

// Decider is who answers a request.
type Decider struct {
	Platform, User, UserName string
}

func (d Decider) String() string {
	if d.UserName != "" {
		return d.Platform + ":" + d.User + " (" + d.UserName + ")"
	}
	return d.Platform + ":" + d.User
}

// Decide records by's answer to request id. It fails with ErrNotFound, ErrNotYours (by is not
// the requester nor an approver of the policy) or ErrSettled (with the record as it is).
func (s *Store) Decide(ctx context.Context, id string, by Decider, approve bool) (Record, error) {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return Record{}, err
	}
	if (by.Platform != rec.Platform || by.User != rec.User || by.User == "") && !s.opt.Policy.Approver(by.Platform, by.User) {
		return rec, ErrNotYours
	}
	if rec.State != StatePending {
		return rec, ErrSettled
	}
	state, reason := StateDenied, "denied by "+by.String()
	if approve {
		state, reason = StateApproved, "approved by "+by.String()
	}
	got, err := s.settle(ctx, id, state, reason, by.String())
	if err != nil {
		return Record{}, err
	}
	if got.State != state || got.DecidedBy != by.String() {
		return got, ErrSettled // another answer came first
	}
	return got, nil
}

// VoidKey voids key's pending requests inside t (the transaction of a /new, /reset or /stop),
// with reason; their waiters wake once t commits.
func (s *Store) VoidKey(ctx context.Context, t *store.Tx, key, reason string) error {
	rows, err := t.QueryContext(ctx, `SELECT id FROM approvals WHERE session_key = $1 AND state = $2`, key, StatePending)
	if err != nil {
		return fmt.Errorf("approval: reading the pending requests: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := t.ExecContext(ctx, `UPDATE approvals SET state = $1, reason = $2, decided_at = $3
		WHERE session_key = $4 AND state = $5`, StateVoided, reason, s.now(), key, StatePending); err != nil {
		return fmt.Errorf("approval: voiding the pending requests: %w", err)
	}
	t.AfterCommit(func() { s.wake(ids...) })
	return nil
}

const columns = `id, session_key, session_id, generation, plugin, profile, platform, user_id, user_name, command, rule,
	turn, state, reason, decided_by, created_at, expires_at, decided_at`

func scan(sc interface{ Scan(...any) error }) (Record, error) {
	var (
		r                   Record
		created, exp, decid int64
	)
	err := sc.Scan(&r.ID, &r.Key, &r.SessionID, &r.Generation, &r.Plugin, &r.Profile, &r.Platform, &r.User, &r.UserName,
		&r.Command, &r.Rule, &r.Turn, &r.State, &r.Reason, &r.DecidedBy, &created, &exp, &decid)
	r.CreatedAt, r.ExpiresAt = time.UnixMilli(created), time.UnixMilli(exp)
	if decid != 0 {
		r.DecidedAt = time.UnixMilli(decid)
	}
	return r, err
}

// Get returns request id.
func (s *Store) Get(ctx context.Context, id string) (Record, error) {
	return Get(ctx, s.db, id)
}

// Get returns request id from db (for readers without a Store: the CLI).
func Get(ctx context.Context, db *sql.DB, id string) (Record, error) {
	r, err := scan(db.QueryRowContext(ctx, `SELECT `+columns+` FROM approvals WHERE id = $1`, strings.ToLower(strings.TrimSpace(id))))
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("approval: reading the request: %w", err)
	}
	return r, nil
}

// Pending returns key's pending requests, oldest first.
func (s *Store) Pending(ctx context.Context, key string) ([]Record, error) {
	return list(ctx, s.db, `session_key = $1 AND state = $2`, key, StatePending)
}

// ForKey returns key's requests, oldest first: what `sessions show` prints. A database
// without the table (a host that never ran this version) has none.
func ForKey(ctx context.Context, db *sql.DB, key string) ([]Record, error) {
	return list(ctx, db, `session_key = $1`, key)
}

// ForKey returns every request of key's conversations, oldest first.
func (s *Store) ForKey(ctx context.Context, key string) ([]Record, error) {
	return ForKey(ctx, s.db, key)
}

func list(ctx context.Context, db *sql.DB, where string, args ...any) ([]Record, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+columns+` FROM approvals WHERE `+where+` ORDER BY created_at, id`, args...)
	if err != nil {
		if msg := err.Error(); strings.Contains(msg, "no such table") || strings.Contains(msg, "does not exist") {
			return nil, nil
		}
		return nil, fmt.Errorf("approval: listing requests: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Void settles request id as voided with reason, if it is still pending (its prompt could not
// be sent, so nobody can answer it).
func (s *Store) Void(ctx context.Context, id, reason string) (Record, error) {
	return s.settle(ctx, id, StateVoided, reason, "")
}
