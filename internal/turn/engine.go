// Package turn turns inbound events into turns and background-process events into
// notifications. It owns the inbox (durable inbound deduplication), one queue of turns per
// session key (one turn at a time; messages for a busy chat are merged; /stop, /new and /reset
// act at once), the slash commands, and the notification path: every process event is
// classified when it is picked up, and whatever it becomes (a text notice, or a synthetic turn
// of the agent) is delivered through the ledger's guarded send, which classifies it again inside
// the key's boundary immediately before the plugin's send.
//
// # Records
//
// Every inbound event is an inbox row from the moment it arrives ("received", written before
// the chat's boundary is taken, so a busy chat never delays the platform's acknowledgement), and
// so is every queued notification. What becomes of a row is written in the same transaction as
// whatever goes with it: a turn's answer and its row's
// "done"; a dropped notification and its ledger drop record; a /stop or /new and everything it
// cancels; a process event's acknowledgement and the ledger row, drop record or inbox row that is
// its outcome. Row states move by compare-and-set, so a turn and the command that interrupts it
// never both record an outcome. Outcomes are true: done, failed, interrupted (by /stop, /new,
// /reset or a restart), dropped.
//
// # Lock order
//
// A plugin instance, then a key's boundary, then one of the engine's in-memory mutexes (each a
// leaf, never held across I/O or together with another). See Engine.
package turn

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/media"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Router says which plugin sends for a platform and profile.
type Router interface {
	PluginFor(platform, profile string) (string, bool)
}

// Options tune an Engine.
type Options struct {
	Logger *slog.Logger
	Now    func() time.Time
	// Instance names this host when several share one database ("" for a single host): the
	// inbox rows it records are its own, Start recovers only those, and Adopt takes over those
	// of a host that stopped.
	Instance string
	// Notifications is the text mode for processes without notify_on_complete: concise
	// (default), all, result, error or off.
	Notifications string
	// HistoryLimit bounds the transcript a turn sees. Default 40 messages.
	HistoryLimit int
	// CommandTimeout bounds a foreground command. Default 60s.
	CommandTimeout time.Duration
	// MaxNotifyAttempts bounds retries of an unverifiable notification. Default 8.
	MaxNotifyAttempts int
	// RetryBase is the first retry delay of an unverifiable notification. Default 2s.
	RetryBase time.Duration
	// MaxAnswerMessages caps how many chat messages one answer becomes; a longer answer is cut
	// with a note, and /more sends the next part. Default 5 (at least 2).
	MaxAnswerMessages int
	// CanEdit reports whether a plugin edits messages (capability "edit"): answers to its chats
	// are streamed into one message edited in place. Nil: none does.
	CanEdit func(plugin string) bool
	// EditInterval is the least time between two edits in one chat. Default 1s.
	EditInterval time.Duration
	// EditsPerSecond bounds the streamed posts and edits of one bot (a plugin's profile) over
	// all its chats: Telegram allows about 30 messages a second per bot. Default 20.
	EditsPerSecond float64
	// CompressAt is the share of the model's context window (agent.Windowed) past which a
	// conversation is compressed between turns, as /compress does; 0: only a context-overflow
	// error compresses (and the turn is tried again).
	CompressAt float64
	// Model is the configured model's name, and Models the ones a chat may choose for its
	// conversation with /model (agent.models); empty: /model is off.
	Model  string
	Models []string
	// CommandAllowed says whether src's sender may use the extension command name (/help lists
	// only those); nil: all.
	CommandAllowed func(ctx context.Context, name, plugin, profile string, src abi.Source) bool
	// Commands are slash commands implemented outside the engine (/cron), by name.
	Commands map[string]Command
	// Grants says which tools a turn for src gets: shell (start commands) and processes
	// (inspect and stop the chat's own processes). Nil grants both (tests); the gateway asks
	// the operator's access policy.
	Grants func(ctx context.Context, plugin, profile string, src abi.Source) (shell, processes bool)
	// Typing, if set, shows a chat action while a user's turn runs: first after TypingAfter
	// (a quick answer needs none), then every TypingEvery, at most once per TypingEvery per
	// chat. Defaults 1s and 4s (Telegram shows "typing" for up to 5 s).
	Typing                   Typist
	TypingAfter, TypingEvery time.Duration
	// Metrics counts turns started and ended (NewMetrics); nil: none.
	Metrics *Metrics
	// Media stores the files of messages and answers (media.go); nil: a message's files are
	// refused, and an answer's are not sent. Fetcher gets an attachment's bytes from its
	// platform plugin; CanAttach reports whether a plugin sends attachments (capability
	// "attachments").
	Media     *media.Store
	Fetcher   Fetcher
	CanAttach func(plugin string) bool
	// WorkRoot holds the conversations' working directories (WorkDir): the commands of a
	// chat's turns run in its own, and an answer's files are sent only from there. "": commands
	// run in the host's directory and answers send no files.
	WorkRoot string
	// Approvals records the requests of commands that wait for a person (approvals.go), and
	// Approval is the operator's policy of which do; nil either: every granted command runs
	// without asking. CanButtons reports whether a plugin shows buttons (capability
	// "buttons"); without them a request is answered with /approve and /deny alone.
	Approvals  *approval.Store
	Approval   *approval.Policy
	CanButtons func(plugin string) bool
}

// Typist sends a chat action ("typing") into a chat through the platform plugin, if the plugin
// declares the typing capability. It is best effort: failures are the implementation's to log.
// It must not be cancelled mid-call (a plugin call cut short is a crash), so it gets a context
// without the turn's cancellation.
type Typist interface {
	Typing(ctx context.Context, plugin, profile string, target abi.OutboundMessage)
}

// Engine runs turns. Its work is split by job, one file each: intake (intake.go: Dispatch, the
// inbox rows received and applied under the boundary), queueing (queue.go: one queue of turns
// per key), running (run.go: a key's runner and the foreground turn), commands (commands.go,
// usercmds.go: queued slash commands; cut.go: /stop, /new, /reset and recalls, which act at
// once), notifications (notify.go: process events picked up, notification turns), streaming
// (stream.go), typing (typing.go), compression (autocompress.go) and the durable records
// (inbox.go, records.go).
//
// Lock order, outermost first. Every path takes these in this order and never goes back:
//
//  1. a plugin instance: held by a plugin call whose host functions dispatch events here, and
//     reserved by the ledger before it takes a boundary to send;
//  2. a key's boundary lock (session.Kernel.WithBoundary): applying a recorded inbound event
//     (Dispatch waits IntakeWait for it, then leaves the event to the chat's intake goroutine),
//     a turn stamping or classifying, a /stop or /new committing with the records of what it
//     cancels;
//  3. the engine's in-memory mutexes, each a leaf: queues.mu (the per-key queues), intake.mu
//     (the events waiting for a boundary), more.mu (/more), edits.mu (the streaming edit rates)
//     and typingRate.mu (the typing indicator's rate). Each is held only to read or change its
//     own state, never across SQL, an agent or plugin call, a channel wait or a context
//     cancellation; nothing is acquired while one is held, so no two are ever held together.
//
// SQLite's write lock is taken under 2 or with nothing held, never under 3. RATIONALE.md says
// why the durable records are written the way they are.
type Engine struct {
	db     *sql.DB
	k      *session.Kernel
	ledger *delivery.Ledger
	agent  agent.Agent
	procs  *process.Registry
	router Router
	opt    Options
	log    *slog.Logger

	queues     queues    // one queue of turns per key (queue.go)
	intake     intakes   // recorded events waiting for their key's boundary (intake.go)
	more       leftovers // the rest of each key's last cut answer (/more; answer.go)
	edits      editRates // streamed posts and edits per chat and per bot (stream.go)
	typingRate chatRates // chat actions per chat (typing.go)
	wg         sync.WaitGroup
	ctx        context.Context
	drain      chan struct{} // closed by Drain: no new work is taken up

	// insertFault, set by tests only, is the error an inbound event's insert reports after it
	// committed: the ambiguous outcome of a context cancelled while the commit ran.
	insertFault error
}

// New creates an Engine. Call Start to recover queued turns and consume process events.
func New(ctx context.Context, db *sql.DB, k *session.Kernel, l *delivery.Ledger, a agent.Agent, procs *process.Registry, r Router, opt Options) (*Engine, error) {
	if err := store.Migrate(ctx, db, "turn", migrations); err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Notifications == "" {
		opt.Notifications = ModeConcise
	}
	if opt.HistoryLimit <= 0 {
		opt.HistoryLimit = 40
	}
	if opt.CommandTimeout <= 0 {
		opt.CommandTimeout = 60 * time.Second
	}
	if opt.MaxNotifyAttempts <= 0 {
		opt.MaxNotifyAttempts = 8
	}
	if opt.RetryBase <= 0 {
		opt.RetryBase = 2 * time.Second
	}
	if opt.MaxAnswerMessages <= 0 {
		opt.MaxAnswerMessages = 5
	}
	opt.MaxAnswerMessages = max(opt.MaxAnswerMessages, 2)
	if opt.EditInterval <= 0 {
		opt.EditInterval = time.Second
	}
	if opt.EditsPerSecond <= 0 {
		opt.EditsPerSecond = 20
	}
	l.PaceEdits(opt.EditsPerSecond)
	if opt.TypingAfter <= 0 {
		opt.TypingAfter = time.Second
	}
	if opt.TypingEvery <= 0 {
		opt.TypingEvery = 4 * time.Second
	}

	return &Engine{db: db, k: k, ledger: l, agent: a, procs: procs, router: r, opt: opt, log: opt.Logger, ctx: ctx,
		drain: make(chan struct{}), queues: queues{keys: map[string]*keyQueue{}, changed: make(chan struct{})}, intake: intakes{m: map[string]*intakeQueue{}},
		more: leftovers{m: map[string]*pending{}}, edits: newEditRates(), typingRate: chatRates{last: map[string]time.Time{}}}, nil
}

func newID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Start re-queues the turns a previous run left queued, reports the ones it interrupted, and
// starts consuming process events. It returns at once; the work stops when ctx is cancelled.
//
// A foreground turn that was running when the host stopped is not run again (it could repeat
// its side effects, a command it started): it is recorded interrupted and the user is told, in
// one transaction. A notification turn that was running is queued again: it has no side
// effects, and its answer is recorded in the same transaction that ends it, so it had none.
func (e *Engine) Start(ctx context.Context) error {
	e.ctx = ctx
	open, err := e.loadOpen(ctx, `owner = $1`, e.opt.Instance)
	if err != nil {
		return err
	}
	// Inbound events recorded but not applied before the stop are applied now, in order.
	received, err := e.loadReceived(ctx, `owner = $1`, e.opt.Instance)
	if err != nil {
		return err
	}
	e.recover(open, received)
	if e.procs != nil {
		e.wg.Add(1)
		go e.consume(ctx)
	}
	return nil
}

// recover takes up inbox rows that a run of this host, or a host that died, left open: running
// foreground turns are ended as interrupted (the user is told), running notification turns and
// queued turns are queued again, and recorded events are applied in order.
func (e *Engine) recover(open []inboxRow, received []*inboxRow) {
	for _, r := range open {
		it := e.itemOf(r)
		if r.state == stRunning && r.kind == kindMessage {
			notice := e.noticeMsg(r.plugin, r.profile, r.key, r.src, "⚠️ I was restarted while answering your last message; please send it again.")
			e.end(r.key, it, stInterrupted, "interrupted: the host restarted during this turn", &notice, stRunning)
			continue
		}
		if r.state == stRunning {
			if err := e.write(func(ctx context.Context, t *store.Tx) error {
				_, err := e.settle(ctx, t, r.key, it, stQueued, "", stRunning)
				return err
			}); err != nil {
				e.log.Error("turn: re-queueing an interrupted notification turn failed", "id", r.id, "error", err)
				continue
			}
		}
		e.enqueue(r.key, it)
	}
	e.applyLater(received)
}

// Adopt takes over the open inbox rows of host dead, which stopped (the caller knows it, from
// the host's expired lease), and recovers them as a restart would. It moves the rows in one
// statement that matches only rows still dead's, so of two hosts adopting at once each row goes
// to one. It returns how many rows it took over.
func (e *Engine) Adopt(ctx context.Context, dead string) (int, error) {
	if dead == e.opt.Instance {
		return 0, nil
	}
	ids, err := e.takeOver(ctx, dead)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	in := `id IN (` + store.Placeholders(1, len(ids)) + `)`
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	open, err := e.loadOpen(ctx, in, args...)
	if err != nil {
		return len(ids), err
	}
	received, err := e.loadReceived(ctx, in, args...)
	if err != nil {
		return len(ids), err
	}
	e.log.Warn("turn: took over the open inbox of a stopped host", "host", dead, "rows", len(ids))
	e.recover(open, received)
	return len(ids), nil
}

// Owners returns the hosts other than this one that own open inbox rows (received, queued or
// running). With several hosts, one of them that has no lease went on recording events after
// another took it over, and then stopped: nobody would take those rows over (the gateway's
// sweep looks for such hosts).
func (e *Engine) Owners(ctx context.Context) ([]string, error) {
	return store.Strings(ctx, e.db, `SELECT owner FROM turn_inbox WHERE state IN ('queued', 'running') AND owner <> $1
		UNION SELECT owner FROM turn_inbox WHERE state = 'received' AND owner <> $2`, e.opt.Instance, e.opt.Instance)
}

// takeOver moves dead's open inbox rows to this host and returns their ids.
func (e *Engine) takeOver(ctx context.Context, dead string) ([]string, error) {
	return store.Strings(ctx, e.db, `UPDATE turn_inbox SET owner = $1
		WHERE owner = $2 AND state IN ('received', 'queued', 'running') RETURNING id`, e.opt.Instance, dead)
}

// Wait blocks until the engine's goroutines have stopped (after ctx is cancelled).
func (e *Engine) Wait() { e.wg.Wait() }
