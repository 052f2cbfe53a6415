// Package delivery is the outbound path: a durable ledger of every message the host sends
// (replies, process notifications, scheduled messages), and the workers that send them through
// the platform plugins.
//
// A message is written to the ledger before it is sent and moves
//
//	pending → sending → delivered (with the platform's message ids)
//	                  → failed (permanent refusal, retries exhausted, or outcome unknown)
//	        → dropped (reason: the conversation it belonged to is gone)
//
// Messages of one conversation (session key) go out in order, one at a time, through that key's
// lane, and lanes run side by side (two threads of one channel are two conversations, and one
// slow send holds only its own); a platform's retry_after blocks the chat, every lane of it, not
// the host. A guarded message is re-validated inside the
// session key's boundary lock immediately before the plugin's send, in the same critical
// section, so a /new that lands between the check and the send is impossible. A message left
// "sending" by a crash is reconciled at start-up as failed(outcome unknown), never resent: a
// duplicate in the user's chat is worse than a gap the operator can see.
package delivery

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/chunk"
	"github.com/hermes-host/hermes-host/internal/lease"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// State is a ledger row's state.
type State string

// Ledger states.
const (
	Pending   State = "pending"
	Sending   State = "sending"
	Delivered State = "delivered"
	Failed    State = "failed"
	Dropped   State = "dropped"
)

// Final reports whether s is a final state.
func (s State) Final() bool { return s == Delivered || s == Failed || s == Dropped }

// Kinds of message, for display.
const (
	KindReply        = "reply"        // the answer to a user's turn
	KindDraft        = "draft"        // an answer shown while it is written (streaming), before its final text
	KindNotification = "notification" // a background process notice or synthetic-turn answer
	KindScheduled    = "scheduled"    // sent by a scheduler plugin (cron)
	KindNotice       = "notice"       // a host notice (/new confirmation, errors)
)

// GuardMode says what must still hold for a guarded message to be sent.
type GuardMode string

// Guard modes.
const (
	// GuardNone: deliver by route (an unstamped message, a command confirmation).
	GuardNone GuardMode = ""
	// GuardLineage: the stamped session or its compression continuation must own the chat; a
	// session that ended for a non-user reason delivers to the current one (ARCHITECTURE §3).
	GuardLineage GuardMode = "lineage"
	// GuardWork: GuardLineage, and the key's generation must still be the one the work started
	// at: /stop, /new and the other transitions cancel a turn's answer.
	GuardWork GuardMode = "work"
	// GuardOwned: the stamped session or its continuation must own the chat (a scheduler send
	// pinned to a session); ended-for-non-user-reason is not enough.
	GuardOwned GuardMode = "owned"
)

// Message is what callers hand to Enqueue.
type Message struct {
	Plugin, Profile string // the platform plugin and profile that send it
	Key             string // session key of the chat: whose boundary lock guards the send
	Target          abi.OutboundMessage
	Text            string
	Kind            string
	Guard           GuardMode
	Stamp           session.Stamp // the owner, for guarded messages
	Generation      int64         // GuardWork: the generation the work started at
	// Transcript, when true, appends Text to the session the verdict names, in the same
	// critical section as the first part's successful send, as an assistant message (or with
	// TranscriptRole, e.g. "notification" for a process notice that carries program output).
	Transcript     bool
	TranscriptRole string
	// Parts, when set, are the message's parts as the caller split them (see Split); Text is
	// still what the transcript records.
	Parts []string
	// Seed, when set, is appended as a user message to the session the verdict names (created
	// if the key has none) in the same critical section as the first part's successful send: a
	// scheduled message's record in the transcript, so a reply continues with it as context.
	Seed   string
	Origin string // what produced it: "turn:in_…", "proc_…#12", "cron:…"
	// Link, when set, is the group of an earlier message this one relates to: the draft of a
	// streamed answer whose outcome is unknown, which this message completes, or the message
	// /last sends again (Last).
	Link string
	// About, when set, is the subject the message is about, as withdrawn with store.Tx.Withdraw
	// (a process's notice is about the process: process.Subject). A part not sent by the time
	// its subject is withdrawn is dropped instead ("suppressed: " and the withdrawal's reason).
	// The check is in the compare-and-set that claims the part for its send, inside the key's
	// boundary, right before the plugin's send: a withdrawal committed before the claim drops
	// the part, and one after it finds the part sent or being sent.
	About string
}

// Row is one ledger entry (one part of a message).
type Row struct {
	ID          string              `json:"id"`
	Group       string              `json:"group"` // the message this part belongs to
	Part        int                 `json:"part"`
	Parts       int                 `json:"parts"`
	Plugin      string              `json:"plugin"`
	Profile     string              `json:"profile"`
	Key         string              `json:"key"`
	Target      abi.OutboundMessage `json:"target"`
	Kind        string              `json:"kind"`
	Guard       GuardMode           `json:"guard,omitempty"`
	Stamp       session.Stamp       `json:"stamp,omitempty"`
	Generation  int64               `json:"generation,omitempty"`
	State       State               `json:"state"`
	Reason      string              `json:"reason,omitempty"`
	Attempts    int                 `json:"attempts"`
	MessageIDs  []string            `json:"message_ids,omitempty"`
	SessionID   string              `json:"session_id,omitempty"` // where it was delivered
	Origin      string              `json:"origin,omitempty"`
	Link        string              `json:"link,omitempty"`  // see Message.Link
	About       string              `json:"about,omitempty"` // see Message.About
	CreatedAt   time.Time           `json:"created_at"`
	UpdatedAt   time.Time           `json:"updated_at"`
	NextAttempt time.Time           `json:"next_attempt,omitempty"`
	transcript  string
	tRole       string
	seed        string
	// stored is the state and attempt count the database holds for the row as this host last
	// read or wrote it: every later write of the row is a compare-and-set on it (see cas).
	stored stored
}

// stored is a row's state and attempts as last seen in the database.
type stored struct {
	state    State
	attempts int
}

var migrations = []store.Migration{{SQLite: `
CREATE TABLE deliveries (
	id          TEXT PRIMARY KEY,
	grp         TEXT NOT NULL,
	part        INTEGER NOT NULL,
	parts       INTEGER NOT NULL,
	plugin      TEXT NOT NULL,
	profile     TEXT NOT NULL,
	lane        TEXT NOT NULL,
	session_key TEXT NOT NULL,
	target      TEXT NOT NULL,
	kind        TEXT NOT NULL,
	guard       TEXT NOT NULL DEFAULT '',
	stamp       TEXT NOT NULL DEFAULT '',
	generation  INTEGER NOT NULL DEFAULT 0,
	transcript  TEXT NOT NULL DEFAULT '',
	state       TEXT NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	attempts    INTEGER NOT NULL DEFAULT 0,
	message_ids TEXT NOT NULL DEFAULT '',
	session_id  TEXT NOT NULL DEFAULT '',
	origin      TEXT NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	next_at     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX deliveries_open ON deliveries (state, lane, created_at) WHERE state IN ('pending', 'sending');
CREATE INDEX deliveries_key ON deliveries (session_key, created_at);
CREATE INDEX deliveries_time ON deliveries (created_at);
CREATE TABLE chat_migrations (
	plugin  TEXT NOT NULL,
	profile TEXT NOT NULL,
	chat_id TEXT NOT NULL,
	new_chat_id TEXT NOT NULL,
	PRIMARY KEY (plugin, profile, chat_id)
);`,
	Postgres: `
CREATE TABLE deliveries (
	id          TEXT PRIMARY KEY,
	grp         TEXT NOT NULL,
	part        BIGINT NOT NULL,
	parts       BIGINT NOT NULL,
	plugin      TEXT NOT NULL,
	profile     TEXT NOT NULL,
	lane        TEXT NOT NULL,
	session_key TEXT NOT NULL,
	target      TEXT NOT NULL,
	kind        TEXT NOT NULL,
	guard       TEXT NOT NULL DEFAULT '',
	stamp       TEXT NOT NULL DEFAULT '',
	generation  BIGINT NOT NULL DEFAULT 0,
	transcript  TEXT NOT NULL DEFAULT '',
	state       TEXT NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	attempts    BIGINT NOT NULL DEFAULT 0,
	message_ids TEXT NOT NULL DEFAULT '',
	session_id  TEXT NOT NULL DEFAULT '',
	origin      TEXT NOT NULL DEFAULT '',
	created_at  BIGINT NOT NULL,
	updated_at  BIGINT NOT NULL,
	next_at     BIGINT NOT NULL DEFAULT 0,
	rowid BIGINT GENERATED BY DEFAULT AS IDENTITY -- SQLite's implicit rowid
);
CREATE INDEX deliveries_open ON deliveries (state, lane, created_at) WHERE state IN ('pending', 'sending');
CREATE INDEX deliveries_key ON deliveries (session_key, created_at);
CREATE INDEX deliveries_time ON deliveries (created_at);
CREATE TABLE chat_migrations (
	plugin  TEXT NOT NULL,
	profile TEXT NOT NULL,
	chat_id TEXT NOT NULL,
	new_chat_id TEXT NOT NULL,
	PRIMARY KEY (plugin, profile, chat_id),
	rowid BIGINT GENERATED BY DEFAULT AS IDENTITY -- SQLite's implicit rowid
);`},
	store.Same(`CREATE INDEX deliveries_grp ON deliveries (grp, part);`),
	// Entries of an index are ordered by rowid within equal keys: a lane's pending rows come out
	// in enqueue order without a sort.
	store.Same(`CREATE INDEX deliveries_lane ON deliveries (lane, state);`),
	// The role the transcript records the message with ('' is assistant).
	store.Same(`ALTER TABLE deliveries ADD COLUMN transcript_role TEXT NOT NULL DEFAULT '';`),
	// A scheduled message's seed for the transcript ('' for none).
	store.Same(`ALTER TABLE deliveries ADD COLUMN seed TEXT NOT NULL DEFAULT '';`),
	// The group of an earlier message this one relates to ('' for none; Message.Link).
	store.Same(`ALTER TABLE deliveries ADD COLUMN link TEXT NOT NULL DEFAULT '';`),
	// Lanes are per session key (a thread that is a conversation of its own no longer waits
	// behind another thread's slow send); what applies to a whole chat (a platform's flood
	// control, a chat migration) finds the chat's rows by plugin, profile and chat_id. Open rows
	// written before get both at Open (backfill).
	store.Same(`ALTER TABLE deliveries ADD COLUMN chat_id TEXT NOT NULL DEFAULT '';
CREATE INDEX deliveries_chat ON deliveries (plugin, profile, chat_id, state);`),
	// The subject a message is about (Message.About; '' for none). An open row written before
	// was a process's notice when its origin is the process id (proc_…), which is the process's
	// subject (process.Subject).
	store.Same(`ALTER TABLE deliveries ADD COLUMN about TEXT NOT NULL DEFAULT '';
UPDATE deliveries SET about = origin WHERE state IN ('pending', 'sending') AND substr(origin, 1, 5) = 'proc_';`),
	// /metrics counts the rows by state and kind at every scrape (ReadStats) on indexes alone,
	// without reading the rows (their texts make them long): all rows by kind (an index that a
	// row's state changes do not touch), the open ones on deliveries_open, and the failed and
	// dropped ones on a partial index a row enters once, when it ends so; delivered is the rest.
	store.Same(`CREATE INDEX deliveries_kind ON deliveries (kind);
CREATE INDEX deliveries_ended ON deliveries (state, kind) WHERE state IN ('failed', 'dropped');`),
}

// Transport sends messages through the platform plugins.
type Transport interface {
	// Reserve takes what one send through plugin needs (an instance of it). The ledger calls it
	// before taking the key's boundary lock: the lock order is plugin instance, then boundary
	// (a plugin's host functions take boundaries while holding their instance), so waiting for an
	// instance while holding a boundary could wait on a call that waits on that boundary.
	Reserve(ctx context.Context, plugin string) (Sender, error)
	// Limit is the plugin's message length limit, or why the plugin cannot send now (not
	// loaded, failed). An error wrapping ErrPluginStarting means the host is still loading its
	// plugins: the attempt is postponed without being counted.
	Limit(plugin string) (abi.MessageLimit, error)
}

// Sender is one reserved send.
type Sender interface {
	// Send transmits msg for profile. It is called at most once.
	Send(ctx context.Context, profile string, msg abi.OutboundMessage) (*abi.SendResult, error)
	// Release gives the reservation back; after Send it does nothing.
	Release()
}

// Options tune a Ledger.
type Options struct {
	Logger *slog.Logger
	Now    func() time.Time
	// MaxAttempts bounds retries of one part (retryable failures and unverifiable guards).
	// Default 8.
	MaxAttempts int
	// Backoff is the first retry delay without a retry_after; it doubles up to MaxBackoff.
	// Defaults 1s and 5m.
	Backoff, MaxBackoff time.Duration
	// Lanes bounds how many chats are sent to concurrently. Default 64.
	Lanes int
	// Observer, if set, is called after every state change (tests and metrics).
	Observer func(Row)
	// Metrics counts the ledger's events (NewMetrics); nil: none.
	Metrics *Metrics
	// Sweep, when several hosts share one database, is how often this one takes over the
	// deliveries a host that died left: its interrupted sends and its lanes' pending rows
	// (sweep). 0 (one host) turns the sweeper off.
	Sweep time.Duration
	// Leases, when several hosts share one database, makes each lane run in one host at a
	// time: a lane runs while its host holds the lease "lane:<lane id>" (renewed every third of
	// the lease, deleted when the lane goes idle), and a lane whose host died is claimed by
	// the sweeper once its lease expired. Without it every host's lane for a chat would race
	// for each row (claim keeps that correct, but each row would cost every host a boundary).
	Leases *lease.Manager
	// UncertainDelay is how long after a message ends "outcome unknown" the chat's notice about
	// it is due; UncertainHold how long at most the notice then waits for the platform to
	// answer again (uncertain.go). Defaults 2s and 30s.
	UncertainDelay, UncertainHold time.Duration
	// UndeliveredAfter bounds how long a message waits for its plugin to be connected to the
	// platform (sends answered abi.SendNotConnected) before it fails. Default 10m.
	UndeliveredAfter time.Duration
}

// Ledger is the delivery ledger and its senders.
type Ledger struct {
	db       *sql.DB
	kernel   *session.Kernel
	tr       Transport
	opt      Options
	log      *slog.Logger
	qNextDue string // qNextDue in the database's dialect (PostgreSQL has no INDEXED BY)

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // prepared once: parsing SQL costs more than running it here

	migMu sync.RWMutex
	moved map[string]string // chatKey → new chat id (chat_migrations, loaded at Open)

	mu      sync.Mutex
	lanes   map[string]*lane
	sem     chan struct{}
	waiters map[string][]chan Row // group → waiters for its final state
	// lastAnswer is when each plugin's profile last gave a certain answer to a send
	// ("plugin\x00profile" → time): uncertain-outcome notices wait for it (uncertain.go).
	lastAnswer map[string]time.Time
	// chatBlocked is when each chat's flood control (a platform's retry_after, met by any of
	// its lanes) ends (chatKey → time).
	chatBlocked map[string]time.Time
	// editGap and editNext pace the drafts and edits of each bot ("plugin\x00profile" → the
	// earliest time its next one may go; PaceEdits, pace).
	editGap  time.Duration
	editNext map[string]time.Time
	running  bool
	ctx      context.Context
	wg       sync.WaitGroup
	settled  chan struct{} // closed (and replaced) when a lane exits or begins to wait (Drain)
	halt     chan struct{} // closed by Stop: the sweeper ends
}

// Open migrates the ledger's tables and returns a Ledger. Call Run to start sending.
func Open(ctx context.Context, db *sql.DB, k *session.Kernel, tr Transport, opt Options) (*Ledger, error) {
	if err := store.Migrate(ctx, db, "delivery", migrations); err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.MaxAttempts <= 0 {
		opt.MaxAttempts = 8
	}
	if opt.Backoff <= 0 {
		opt.Backoff = time.Second
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 5 * time.Minute
	}
	if opt.Lanes <= 0 {
		opt.Lanes = 64
	}
	if opt.UncertainDelay <= 0 {
		opt.UncertainDelay = defaultUncertainDelay
	}
	if opt.UncertainHold <= 0 {
		opt.UncertainHold = defaultUncertainHold
	}
	if opt.UndeliveredAfter <= 0 {
		opt.UndeliveredAfter = 10 * time.Minute
	}
	l := &Ledger{db: db, kernel: k, tr: tr, opt: opt, log: opt.Logger, stmts: map[string]*sql.Stmt{}, moved: map[string]string{},
		lanes: map[string]*lane{}, sem: make(chan struct{}, opt.Lanes), waiters: map[string][]chan Row{}, lastAnswer: map[string]time.Time{}, chatBlocked: map[string]time.Time{}, editNext: map[string]time.Time{}, settled: make(chan struct{}), qNextDue: qNextDue.For(db)}
	if err := l.backfill(ctx); err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT plugin, profile, chat_id, new_chat_id FROM chat_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var plugin, profile, chat, to string
		if err := rows.Scan(&plugin, &profile, &chat, &to); err != nil {
			return nil, err
		}
		l.moved[chatKey(plugin, profile, chat)] = to
	}
	return l, rows.Err()
}

// backfill gives the open rows written before lanes were per session key their chat_id and
// their session key as lane (a no-op once done).
func (l *Ledger) backfill(ctx context.Context) error {
	rows, err := l.db.QueryContext(ctx, `SELECT id, target FROM deliveries WHERE state IN ('pending', 'sending') AND chat_id = ''`)
	if err != nil {
		return err
	}
	type fill struct{ id, chat string }
	var fills []fill
	for rows.Next() {
		var id, target string
		if err := rows.Scan(&id, &target); err != nil {
			rows.Close()
			return err
		}
		var t abi.OutboundMessage
		if err := json.Unmarshal([]byte(target), &t); err != nil {
			rows.Close()
			return fmt.Errorf("delivery: row %s: corrupt target: %w", id, err)
		}
		fills = append(fills, fill{id, t.ChatID})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return store.Update(ctx, l.db, store.PathLedger, func(tx *store.Tx) error {
		for _, f := range fills {
			if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET chat_id = $1, lane = session_key WHERE id = $2`, f.chat, f.id); err != nil {
				return err
			}
		}
		return nil
	})
}

// migrated returns the chat id a migrated chat moved to.
func (l *Ledger) migrated(plugin, profile, chat string) (string, bool) {
	l.migMu.RLock()
	defer l.migMu.RUnlock()
	to, ok := l.moved[chatKey(plugin, profile, chat)]
	return to, ok
}

// stmt returns the prepared statement for q, preparing it on first use.
func (l *Ledger) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	l.stmtMu.Lock()
	defer l.stmtMu.Unlock()
	if s := l.stmts[q]; s != nil {
		return s, nil
	}
	s, err := l.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	l.stmts[q] = s
	return s, nil
}

// exec runs a prepared statement (inside tx when tx is not nil).
func (l *Ledger) exec(ctx context.Context, tx *store.Tx, q string, args ...any) (sql.Result, error) {
	s, err := l.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	if tx != nil {
		s = tx.StmtContext(ctx, s)
	}
	res, err := s.ExecContext(ctx, args...)
	store.Report(l.db, store.PathLedger, err)
	return res, err
}

func newID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// A lane is one session key's: its messages go out in order, one at a time, and lanes run side
// by side. The lane id is the session key itself, the same text on every backend.

// laneID is the id of r's lane.
func laneID(r Row) string { return r.Key }

// chatKey names a chat in memory (flood control, migrations): the names joined by NUL bytes,
// which no name holds. It is never stored: the table has the three columns.
func chatKey(plugin, profile, chatID string) string {
	return plugin + "\x00" + profile + "\x00" + chatID
}

// Enqueue splits m by the plugin's message limit and records the parts as pending, in one
// transaction, then wakes the chat's lane. It returns the message's group id.
func (l *Ledger) Enqueue(ctx context.Context, m Message) (string, error) {
	return l.insert(ctx, nil, m, l.parts(m), Pending, "", time.Time{})
}

// EnqueueTx is Enqueue inside the unit of work tx, so that a message commits together with the
// state change that produced it (an inbox row marked done, a process event acknowledged, a /new
// that cancels queued work). Its lane wakes once tx committed.
func (l *Ledger) EnqueueTx(ctx context.Context, tx *store.Tx, m Message) (string, error) {
	return l.insert(ctx, tx, m, l.parts(m), Pending, "", time.Time{})
}

// parts is m's parts: as the caller split them, or split by the plugin's limit.
func (l *Ledger) parts(m Message) []string {
	if len(m.Parts) > 0 {
		return m.Parts
	}
	if m.Target.Action != "" {
		return []string{m.Text}
	}
	return l.Split(m.Plugin, m.Text)
}

// Split cuts text into the parts Enqueue would send through plugin (by its message limit).
func (l *Ledger) Split(plugin, text string) []string {
	if limit, err := l.tr.Limit(plugin); err == nil && limit.Max > 0 {
		return chunk.Split(text, limit)
	}
	return []string{text}
}

// Record writes m straight to a final state (Dropped with reason, typically): a notification
// classified stale at pickup is recorded, never silently discarded.
func (l *Ledger) Record(ctx context.Context, m Message, state State, reason string) (string, error) {
	return l.insert(ctx, nil, m, []string{m.Text}, state, reason, time.Time{})
}

// RecordTx is Record inside the unit of work tx (the drop of a notification commits with the
// acknowledgement of its process event, or with the /new that cancels it).
func (l *Ledger) RecordTx(ctx context.Context, tx *store.Tx, m Message, state State, reason string) (string, error) {
	return l.insert(ctx, tx, m, []string{m.Text}, state, reason, time.Time{})
}

// insertDue is Enqueue of m's parts, due at due.
func (l *Ledger) insertDue(ctx context.Context, m Message, parts []string, due time.Time) (string, error) {
	return l.insert(ctx, nil, m, parts, Pending, "", due)
}

// publish makes rows written and committed known: observers hear of each, pending ones wake
// their lane, final ones release the waiters of their message.
func (l *Ledger) publish(rows []Row) {
	for _, r := range rows {
		l.observe(r)
	}
	woken := map[string]bool{}
	for _, r := range rows {
		switch {
		case r.State == Pending && !woken[laneID(r)]:
			woken[laneID(r)] = true
			l.wake(laneID(r))
		case r.State.Final() && r.Part == r.Parts:
			l.finish(r)
		}
	}
}

// insert records m's parts in state, inside tx (published once it commits), or, with tx nil,
// on its own (one statement, or one transaction for several parts) and published at once.
func (l *Ledger) insert(ctx context.Context, tx *store.Tx, m Message, parts []string, state State, reason string, due time.Time) (string, error) {
	if m.Target.ChatID == "" {
		return "", fmt.Errorf("delivery: message has no chat id")
	}
	if m.Key == "" {
		return "", fmt.Errorf("delivery: message has no session key")
	}
	now := l.opt.Now()
	group := newID("dlv_")
	stamp := ""
	if m.Guard != GuardNone {
		b, err := json.Marshal(m.Stamp)
		if err != nil {
			return "", fmt.Errorf("delivery: stamp: %w", err)
		}
		stamp = string(b)
	}
	// A chat that migrated (Telegram group → supergroup) is re-addressed before sending.
	if moved, ok := l.migrated(m.Plugin, m.Profile, m.Target.ChatID); ok {
		m.Target.ChatID = moved
	}
	var nextAt int64
	if !due.IsZero() {
		nextAt = due.UnixMilli()
	}
	var rows []Row
	write := func(tx *store.Tx) error {
		rows = rows[:0]
		for i, text := range parts {
			id := group
			if len(parts) > 1 {
				id = fmt.Sprintf("%s.%d", group, i+1)
			}
			tg := m.Target
			tg.Text, tg.Part, tg.Parts, tg.DeliveryID = text, i+1, len(parts), id
			if len(parts) == 1 {
				tg.Part, tg.Parts = 0, 0
			}
			tb, err := json.Marshal(tg)
			if err != nil {
				return fmt.Errorf("target: %w", err)
			}
			transcript, seed := "", ""
			if m.Transcript && i == 0 {
				transcript = m.Text
			}
			if i == 0 {
				seed = m.Seed
			}
			if _, err := l.exec(ctx, tx, qInsert,
				id, group, i+1, len(parts), m.Plugin, m.Profile, m.Key, m.Target.ChatID,
				m.Key, string(tb), m.Kind, string(m.Guard), stamp, m.Generation, transcript, string(state), reason,
				m.Origin, now.UnixMilli(), now.UnixMilli(), m.TranscriptRole, seed, m.Link, nextAt, m.About); err != nil {
				return err
			}
			rows = append(rows, Row{ID: id, Group: group, Part: i + 1, Parts: len(parts), Plugin: m.Plugin, Profile: m.Profile,
				Key: m.Key, Target: tg, Kind: m.Kind, Guard: m.Guard, Stamp: m.Stamp, Generation: m.Generation,
				State: state, Reason: reason, Origin: m.Origin, Link: m.Link, About: m.About, NextAttempt: due, CreatedAt: now, UpdatedAt: now,
				transcript: transcript, tRole: m.TranscriptRole, seed: seed, stored: stored{state, 0}})
		}
		return nil
	}
	var err error
	switch {
	case tx != nil:
		if err = write(tx); err == nil {
			tx.AfterCommit(func() { l.publish(rows) })
		}
	case len(parts) == 1:
		err = write(nil) // one statement is atomic on its own
	default:
		err = store.Update(ctx, l.db, store.PathLedger, write) // all parts or none
	}
	store.Report(l.db, store.PathLedger, err)
	if err != nil {
		return "", fmt.Errorf("delivery: record: %w", err)
	}
	if tx == nil {
		l.publish(rows)
	}
	return group, nil
}

const (
	qInsert = `INSERT INTO deliveries (id, grp, part, parts, plugin, profile, lane, chat_id,
		session_key, target, kind, guard, stamp, generation, transcript, state, reason, origin, created_at, updated_at, transcript_role, seed, link, next_at, about)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)`
	qNextAt = `SELECT MIN(next_at) FROM deliveries WHERE lane = $1 AND state = 'pending'`
	// Every write of an existing row is a compare-and-set on the state and attempt count this
	// host last saw (Row.stored): see cas.
	qClaim  = `UPDATE deliveries SET state = 'sending', reason = '', attempts = $1, updated_at = $2 WHERE id = $3 AND state = $4 AND attempts = $5`
	qSettle = `UPDATE deliveries SET state = $1, reason = $2, attempts = $3, message_ids = $4, session_id = $5, updated_at = $6 WHERE id = $7 AND state = $8 AND attempts = $9`
	qRetry  = `UPDATE deliveries SET state = $1, reason = $2, attempts = $3, next_at = $4, updated_at = $5 WHERE id = $6 AND state = $7 AND attempts = $8`
)

// qNextDue is the lane's next row to send. SQLite is told to use the lane index (its planner
// would otherwise pick the partial deliveries_open index and sort); PostgreSQL has no INDEXED
// BY, and plans it from statistics.
var qNextDue = store.Query{SQLite: nextDue(" INDEXED BY deliveries_lane"), Postgres: nextDue("")}

func nextDue(hint string) string {
	return `SELECT ` + rowColumns + ` FROM deliveries d` + hint + ` WHERE lane = $1 AND state = 'pending' AND next_at <= $2
		AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.grp = d.grp AND p.part < d.part AND p.state IN ('pending', 'sending'))
		ORDER BY d.rowid LIMIT 1`
}

// qClaimAbout is qClaim of a message about a subject (Message.About): it claims the row only
// while the subject has not been withdrawn, in the one statement.
var qClaimAbout = qClaim + ` AND ` + store.NotWithdrawn("$6")

// Wait blocks until every part of group is final (or ctx ends) and returns the last part's row.
func (l *Ledger) Wait(ctx context.Context, group string) (Row, error) {
	ch := make(chan Row, 1)
	l.mu.Lock()
	l.waiters[group] = append(l.waiters[group], ch)
	l.mu.Unlock()
	// It may have finished before we registered.
	if r, done, err := l.groupDone(ctx, group); err != nil || done {
		l.dropWaiter(group, ch)
		return r, err
	}
	// This host's lanes tell ch; on a shared database another host's lane may settle the group
	// instead (it took the lane over when this host's lease lapsed), and only the database
	// says so: look again now and then.
	poll := time.NewTicker(WaitPoll)
	defer poll.Stop()
	for {
		select {
		case r := <-ch:
			return r, nil
		case <-poll.C:
			// An error here (the store refusing a read for a moment) is no outcome: wait on.
			if r, done, err := l.groupDone(ctx, group); err == nil && done {
				l.dropWaiter(group, ch)
				return r, nil
			}
		case <-ctx.Done():
			l.dropWaiter(group, ch)
			return Row{}, ctx.Err()
		}
	}
}

// WaitPoll is how often Wait reads a group's rows while it waits: the outcome of a row another
// host's lane settled reaches this host only through the database.
const WaitPoll = time.Second

func (l *Ledger) dropWaiter(group string, ch chan Row) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := l.waiters[group]
	for i, w := range ws {
		if w == ch {
			l.waiters[group] = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(l.waiters[group]) == 0 {
		delete(l.waiters, group)
	}
}

// ErrNoMessage is Outcome's (and Wait's) answer for a group the ledger does not hold.
var ErrNoMessage = errors.New("delivery: no such message")

// Outcome returns group's outcome now, without waiting: done with its worst part once every
// part is final (as Wait returns it), else not done with a part still under way. A scheduler
// that was answered "pending" learns the final outcome this way (hermes_send with delivery_id).
func (l *Ledger) Outcome(ctx context.Context, group string) (Row, bool, error) {
	return l.groupDone(ctx, group)
}

func (l *Ledger) groupDone(ctx context.Context, group string) (Row, bool, error) {
	rows, err := l.query(ctx, `WHERE grp = $1 ORDER BY part`, group)
	if err != nil {
		return Row{}, false, err
	}
	if len(rows) == 0 {
		return Row{}, false, fmt.Errorf("%w: %s", ErrNoMessage, group)
	}
	for _, r := range rows {
		if !r.State.Final() {
			return r, false, nil
		}
	}
	// The group's outcome is its worst part.
	out := rows[len(rows)-1]
	for _, r := range rows {
		if r.State != Delivered {
			out = r
			break
		}
	}
	return out, true, nil
}

// finish notifies waiters when r's group may have become final.
func (l *Ledger) finish(r Row) {
	l.mu.Lock()
	ws := l.waiters[r.Group]
	l.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	out, done, err := l.groupDone(context.Background(), r.Group)
	if err != nil || !done {
		return
	}
	l.mu.Lock()
	ws = l.waiters[r.Group]
	delete(l.waiters, r.Group)
	l.mu.Unlock()
	for _, w := range ws {
		w <- out
	}
}

func (l *Ledger) observe(r Row) {
	l.opt.Metrics.observe(r)
	if l.opt.Observer != nil {
		l.opt.Observer(r)
	}
}

// Filter selects rows for List.
type Filter struct {
	State     State  // "" for all
	KeyPrefix string // "" for all
	Kind      string // "" for all
	Origin    string // what produced the rows (Message.Origin), exactly; "" for all
	Key       string // this session key exactly; "" for all
	Group     string // the parts of this message (Row.Group), or the part with this id; "" for all
	Link      string // the messages linked to this group (Row.Link: the completion of a draft, a /last); "" for all
	// Uncertain selects failed rows the platform may have accepted (the outcome is unknown, so
	// they were not resent).
	Uncertain bool
	// Search keeps the rows whose id, session key, origin or text holds it (case-insensitive).
	Search string
	// Before, a row's id, keeps the rows written before it: the next page after that row
	// (keyset paging, newest first).
	Before string
	Limit  int // default 100
}

// UncertainMark is the mark in the reason of a failed row whose send may have reached the platform.
const UncertainMark = "outcome unknown"

// Uncertain reports whether r failed without knowing whether the platform accepted it.
func (r Row) Uncertain() bool { return r.State == Failed && strings.Contains(r.Reason, UncertainMark) }

// List returns ledger rows, newest first.
func (l *Ledger) List(ctx context.Context, f Filter) ([]Row, error) { return List(ctx, l.db, f) }

// List reads ledger rows from db directly (the CLI runs beside a serving host).
func List(ctx context.Context, db *sql.DB, f Filter) ([]Row, error) {
	var (
		where []string
		args  store.Args
	)
	if f.State != "" {
		where = append(where, "state = "+args.Add(string(f.State)))
	}
	if f.KeyPrefix != "" {
		where = append(where, "substr(session_key, 1, "+args.Add(len(f.KeyPrefix))+") = "+args.Add(f.KeyPrefix))
	}
	if f.Kind != "" {
		where = append(where, "kind = "+args.Add(f.Kind))
	}
	if f.Origin != "" {
		where = append(where, "origin = "+args.Add(f.Origin))
	}
	if f.Key != "" {
		where = append(where, "session_key = "+args.Add(f.Key))
	}
	if f.Group != "" {
		where = append(where, "(grp = "+args.Add(f.Group)+" OR id = "+args.Add(f.Group)+")")
	}
	if f.Link != "" {
		where = append(where, "link = "+args.Add(f.Link))
	}
	if f.Uncertain {
		where = append(where, uncertainWhere(&args))
	}
	if f.Search != "" {
		// Substring tests with replace, as for Uncertain: instr and strpos differ between the backends.
		s := args.Add(strings.ToLower(f.Search))
		var any []string
		for _, col := range []string{"id", "session_key", "origin", "target"} {
			any = append(any, "replace(lower("+col+"), "+s+", '') <> lower("+col+")")
		}
		where = append(where, "("+strings.Join(any, " OR ")+")")
	}
	if f.Before != "" {
		where = append(where, "rowid < (SELECT rowid FROM deliveries WHERE id = "+args.Add(f.Before)+")")
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := ""
	if len(where) > 0 {
		q = "WHERE " + strings.Join(where, " AND ")
	}
	return queryRows(ctx, db, q+" ORDER BY rowid DESC LIMIT "+args.Add(f.Limit), args...)
}

func (l *Ledger) query(ctx context.Context, tail string, args ...any) ([]Row, error) {
	return queryRows(ctx, l.db, tail, args...)
}

const rowColumns = `id, grp, part, parts, plugin, profile, session_key, target, kind, guard, stamp, generation,
	transcript, state, reason, attempts, message_ids, session_id, origin, created_at, updated_at, next_at, transcript_role, seed, link, about`

func queryRows(ctx context.Context, db *sql.DB, tail string, args ...any) ([]Row, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+rowColumns+` FROM deliveries `+tail, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

type scanner interface{ Scan(...any) error }

func scanRow(s scanner) (Row, error) {
	var (
		r                         Row
		target, stamp, ids, guard string
		state                     string
		created, updated, nextAt  int64
	)
	if err := s.Scan(&r.ID, &r.Group, &r.Part, &r.Parts, &r.Plugin, &r.Profile, &r.Key, &target, &r.Kind, &guard, &stamp,
		&r.Generation, &r.transcript, &state, &r.Reason, &r.Attempts, &ids, &r.SessionID, &r.Origin, &created, &updated, &nextAt, &r.tRole, &r.seed, &r.Link, &r.About); err != nil {
		return r, err
	}
	r.Guard, r.State = GuardMode(guard), State(state)
	if err := json.Unmarshal([]byte(target), &r.Target); err != nil {
		return r, fmt.Errorf("delivery: row %s: corrupt target: %w", r.ID, err)
	}
	if stamp != "" {
		if err := json.Unmarshal([]byte(stamp), &r.Stamp); err != nil {
			return r, fmt.Errorf("delivery: row %s: corrupt stamp: %w", r.ID, err)
		}
	}
	if ids != "" {
		if err := json.Unmarshal([]byte(ids), &r.MessageIDs); err != nil {
			return r, fmt.Errorf("delivery: row %s: corrupt message ids: %w", r.ID, err)
		}
	}
	r.stored = stored{r.State, r.Attempts}
	r.CreatedAt, r.UpdatedAt = time.UnixMilli(created), time.UnixMilli(updated)
	if nextAt > 0 {
		r.NextAttempt = time.UnixMilli(nextAt)
	}
	return r, nil
}
