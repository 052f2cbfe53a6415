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
// A plugin instance, then a key's boundary, then Engine.mu (a leaf, never held across I/O;
// Engine.typingMu is another leaf, never held with it). See Engine.
package turn

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
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
}

// Typist sends a chat action ("typing") into a chat through the platform plugin, if the plugin
// declares the typing capability. It is best effort: failures are the implementation's to log.
// It must not be cancelled mid-call (a plugin call cut short is a crash), so it gets a context
// without the turn's cancellation.
type Typist interface {
	Typing(ctx context.Context, plugin, profile string, target abi.OutboundMessage)
}

// Engine runs turns.
//
// Lock order, outermost first. Every path takes these in this order and never goes back:
//
//  1. a plugin instance: held by a plugin call whose host functions dispatch events here, and
//     reserved by the ledger before it takes a boundary to send;
//  2. a key's boundary lock (session.Kernel.WithBoundary): applying a recorded inbound event
//     (Dispatch waits IntakeWait for it, then leaves the event to the chat's intake goroutine),
//     a turn stamping or classifying, a /stop or /new committing with the records of what it
//     cancels;
//  3. Engine.mu, the in-memory queues: a leaf. It is held only to read or change keys and their
//     queues, never across SQL, an agent or plugin call, a channel wait or a context
//     cancellation, and nothing is acquired while it is held. Engine.typingMu, the typing
//     indicator's rate limit, is a leaf of the same kind, never held together with Engine.mu.
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

	mu       sync.Mutex // guards keys, every keyQueue, more, lastEdit, botNext and intake; a leaf (see the lock order above)
	keys     map[string]*keyQueue
	more     map[string]*pending  // the rest of a key's last cut answer (/more)
	lastEdit map[string]time.Time // a chat's last streamed post or edit
	botNext  map[string]time.Time // when a bot (plugin and profile) may stream its next post or edit
	intake   map[string]*intakeQueue
	wg       sync.WaitGroup
	ctx      context.Context

	typingMu   sync.Mutex           // guards typingLast (a leaf lock, like mu; never held with it)
	typingLast map[string]time.Time // chat → when typing was last sent
}

// keyQueue is one chat's turns. Guarded by Engine.mu.
type keyQueue struct {
	items   []*item
	active  bool  // a runKey goroutine serves this queue
	running *item // the turn in progress
	cancel  context.CancelCauseFunc
}

// item is one queued turn: user messages (merged while the chat is busy), a queued slash
// command, or a batch of notifications of one conversation. For notifications, ids, texts,
// stamps, events and notices are parallel: one inbox row per process event.
type item struct {
	kind            string // kindMessage or kindNotification
	ids             []string
	plugin, profile string
	src             abi.Source // where to answer (the latest message's source)
	texts           []string
	msgIDs          []string        // platform message ids of texts (user messages), for recalls
	cmd, arg        string          // a queued slash command
	stamps          []session.Stamp // notifications
	events          []string        // notifications: the process event, "proc_…#seq"
	notices         []agent.Notice  // notifications: the process event as data
	attempts        int
}

// interrupted is the cause a running turn's context is cancelled with: the command that
// stopped it. The command recorded the interruption before cancelling.
type interrupted struct{ by string }

func (i *interrupted) Error() string { return "interrupted by " + i.by }

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

	return &Engine{db: db, k: k, ledger: l, agent: a, procs: procs, router: r, opt: opt, log: opt.Logger,
		keys: map[string]*keyQueue{}, more: map[string]*pending{}, lastEdit: map[string]time.Time{}, botNext: map[string]time.Time{},
		intake: map[string]*intakeQueue{}, ctx: ctx, typingLast: map[string]time.Time{}}, nil
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
	open, err := e.loadOpen(ctx, `owner = ?`, e.opt.Instance)
	if err != nil {
		return err
	}
	// Inbound events recorded but not applied before the stop are applied now, in order.
	received, err := e.loadReceived(ctx, `owner = ?`, e.opt.Instance)
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
			if err := e.write(func(ctx context.Context, t *delivery.Tx) error {
				_, err := e.settle(ctx, t, r.key, it, stQueued, "", stRunning)
				return err
			}); err != nil {
				e.log.Error("turn: re-queueing an interrupted notification turn failed", "id", r.id, "error", err)
				continue
			}
		}
		e.enqueue(r.key, it)
	}
	e.mu.Lock()
	for _, r := range received {
		q := e.intake[r.key]
		if q == nil {
			q = &intakeQueue{}
			e.intake[r.key] = q
			e.wg.Add(1)
			go e.runIntake(r.key, q)
		}
		q.rows = append(q.rows, r)
	}
	e.mu.Unlock()
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
	in := `id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
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

// takeOver moves dead's open inbox rows to this host and returns their ids.
func (e *Engine) takeOver(ctx context.Context, dead string) ([]string, error) {
	rows, err := e.db.QueryContext(ctx, `UPDATE turn_inbox SET owner = ?
		WHERE owner = ? AND state IN ('received', 'queued', 'running') RETURNING id`, e.opt.Instance, dead)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Wait blocks until the engine's goroutines have stopped (after ctx is cancelled).
func (e *Engine) Wait() { e.wg.Wait() }

// IntakeWait is how long Dispatch waits for a busy chat's boundary before leaving the event,
// already recorded, to be applied in the background. A send to a slow platform holds the
// boundary up to the plugin's call deadline; an inbound event must not wait for it.
const IntakeWait = 10 * time.Millisecond

// Dispatch records an inbound event and acts on it: observe, redact and seed at once; a message
// becomes a turn (or, for /stop, /new and /reset, acts at once). The event's source must
// already carry the plugin's own platform and profile. Events are deduplicated by ev.ID.
//
// The event is recorded durably before the chat's boundary is taken, so Dispatch never waits
// on a send in progress in that chat: if the boundary does not come free within IntakeWait,
// the event is applied in the background, after the chat's earlier events, and the reply
// carries no session. Either way, once Dispatch returns nil the event cannot be lost.
func (e *Engine) Dispatch(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (abi.DispatchReply, error) {
	src := ev.Source
	// A chat that continues another (a group upgraded to a supergroup): before the event's own
	// key is built, so that it already lands in the conversation that continues.
	noted, err := e.migrate(ctx, plugin, profile, ev)
	if err != nil {
		return abi.DispatchReply{}, err
	}
	key, err := e.k.Key(src)
	if err != nil {
		return abi.DispatchReply{}, abi.Errorf(abi.CodeBadRequest, "source: %v", err)
	}
	kind := ev.Kind
	switch kind {
	case "":
		kind = abi.EventMessage
	case abi.EventMessage, abi.EventObserve, abi.EventRedact, abi.EventSeed:
	default:
		return abi.DispatchReply{}, abi.Errorf(abi.CodeBadRequest, "unknown event kind %q", kind)
	}
	if noted && kind == abi.EventObserve {
		// The migration's other service message already recorded it in the transcript; the
		// reply still names the conversation that continues.
		r, _, err := e.k.Current(ctx, key)
		if err != nil {
			return abi.DispatchReply{}, abi.Errorf(abi.CodeUnavailable, "reading the session: %v", err)
		}
		return abi.DispatchReply{Session: r.Ref()}, nil
	}
	row := &inboxRow{id: newID("in_"), plugin: plugin, profile: profile, eventID: ev.ID, key: key, src: src,
		text: ev.Text, kind: kindMessage, eventKind: kind}
	if kind != abi.EventMessage {
		row.kind = kindRecord
	}
	fresh, err := e.insert(ctx, e.db, row, stReceived)
	store.Report(e.db, store.PathInbox, err)
	if err != nil {
		return abi.DispatchReply{}, abi.Errorf(abi.CodeUnavailable, "recording the event: %v", err)
	}
	if !fresh {
		return abi.DispatchReply{Duplicate: true}, nil
	}
	// Apply now if the chat has no earlier event waiting and its boundary is free soon enough.
	e.mu.Lock()
	if q := e.intake[key]; q != nil {
		q.rows = append(q.rows, row) // behind the chat's earlier events
		e.mu.Unlock()
		return abi.DispatchReply{}, nil
	}
	q := &intakeQueue{}
	e.intake[key] = q
	e.mu.Unlock()
	ref, applied, err := e.apply(ctx, row, IntakeWait)
	if err != nil {
		e.log.Warn("turn: applying an inbound event failed; retrying in the background", "key", key, "id", row.id, "error", err)
	}
	e.mu.Lock()
	if !applied {
		q.rows = append([]*inboxRow{row}, q.rows...)
	}
	if len(q.rows) > 0 {
		e.wg.Add(1)
		go e.runIntake(key, q)
	} else {
		delete(e.intake, key)
	}
	e.mu.Unlock()
	return abi.DispatchReply{Session: ref}, nil
}

// intakeQueue holds a chat's recorded inbound events that wait for its boundary. Guarded by
// Engine.mu; present in Engine.intake while a Dispatch applies an event of the chat or a
// runIntake goroutine drains the queue, so the chat's events are applied in arrival order.
type intakeQueue struct {
	rows []*inboxRow
}

// runIntake applies key's waiting events in order, each under the boundary (waiting for it as
// long as it takes), retrying a failure with backoff until the engine stops; what it has not
// applied then is applied at the next start.
func (e *Engine) runIntake(key string, q *intakeQueue) {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		if len(q.rows) == 0 || e.ctx.Err() != nil {
			if e.intake[key] == q {
				delete(e.intake, key)
			}
			e.mu.Unlock()
			return
		}
		row := q.rows[0]
		q.rows = q.rows[1:]
		e.mu.Unlock()
		for retry := 100 * time.Millisecond; ; retry = min(retry*2, 30*time.Second) {
			_, _, err := e.apply(e.ctx, row, -1)
			if err == nil || e.ctx.Err() != nil {
				break
			}
			e.log.Error("turn: applying an inbound event failed; retrying", "key", key, "id", row.id, "error", err, "retry", retry)
			select {
			case <-e.ctx.Done():
			case <-time.After(retry):
			}
		}
	}
}

// apply applies a recorded inbound event inside its key's boundary, waiting at most wait for
// it (forever if wait < 0): the row leaves 'received' for its outcome in the same boundary as
// the event's effect (a queued turn, a /stop or /new with what it cancels), and a /status is
// answered afterwards. applied is false if the boundary stayed busy.
func (e *Engine) apply(ctx context.Context, row *inboxRow, wait time.Duration) (ref abi.SessionRef, applied bool, err error) {
	key, src := row.key, row.src
	var (
		submit       *item
		confirm, cmd string
	)
	fn := func(b *session.Boundary) error {
		var res session.Resolution
		var err error
		switch row.eventKind {
		case abi.EventObserve:
			if res, err = b.Resolve(src, session.ResolveOptions{Internal: true}); err != nil {
				return err
			}
			text := row.text
			if src.UserName != "" {
				text = "[" + src.UserName + "] " + text
			}
			_, err = b.Append(res.SessionID, session.Message{Role: "user", Text: text, PlatformMessageID: src.MessageID})
		case abi.EventRedact:
			_, err = b.Redact(src.MessageID)
			if route, ok, cerr := b.Current(); cerr == nil && ok {
				res.Route = route
			}
			if err == nil {
				e.recall(key, src.MessageID)
			}
		case abi.EventSeed:
			res, err = b.Resolve(src, session.ResolveOptions{Internal: true})
		default: // abi.EventMessage
			if res, err = b.Resolve(src, session.ResolveOptions{}); err != nil {
				return err
			}
			if _, err = b.Append(res.SessionID, session.Message{Role: "user", Text: row.text, PlatformMessageID: src.MessageID, Turn: row.id}); err != nil {
				return err
			}
			var arg string
			cmd, arg = e.parseCommand(row.text)
			switch cmd {
			case "stop", "new", "reset":
				// The transition commits together with the row's outcome, the records of what it
				// cancels and its confirmation (see cut).
				if res.Route, err = e.cut(b, key, row, cmd, arg); err != nil {
					return err
				}
				ref = res.Ref()
				return nil
			case "status":
				confirm = e.status(b, key)
			case "help":
				confirm = e.helpText(b.Context(), row.plugin, row.profile, src)
			case "model":
				confirm = e.modelCommand(b, res.SessionID, arg)
			case "usage":
				confirm = e.usageCommand(b.Context(), res.SessionID)
			default:
				submit = &item{kind: kindMessage, ids: []string{row.id}, plugin: row.plugin, profile: row.profile, src: src,
					texts: []string{row.text}, msgIDs: []string{src.MessageID}, cmd: cmd, arg: arg}
			}
		}
		if err != nil {
			return err
		}
		state, outcome := stDone, ""
		switch {
		case confirm != "":
			outcome = "command /" + cmd
		case submit != nil:
			state = stQueued
		}
		if _, err := e.setState(b.Context(), e.db, []string{row.id}, state, outcome, stReceived); err != nil {
			return err
		}
		if submit != nil {
			// Queued inside the boundary: a /new applied after this message cannot overtake it.
			e.enqueue(key, submit)
		}
		ref = res.Ref()
		return nil
	}
	if wait < 0 {
		err = e.k.WithBoundary(ctx, key, fn)
		applied = err == nil
	} else {
		applied, err = e.k.TryBoundary(ctx, key, wait, fn)
		applied = applied && err == nil
	}
	if err != nil {
		return ref, false, err
	}
	if !applied {
		return ref, false, nil
	}
	if confirm != "" {
		e.notice(ctx, row.plugin, row.profile, key, src, confirm)
	}
	return ref, true, nil
}

// migrate applies ev's migrate_from_chat_id: the new chat continues the old one's
// conversations (unless it has its own already) and what is still owed to the old chat goes to
// the new one. It reports whether the migration had already been recorded with its alias, in
// which case the event's text is not appended again.
func (e *Engine) migrate(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (bool, error) {
	src, from := ev.Source, ev.MigrateFromChatID
	if from == "" || src.ChatID == "" || from == src.ChatID {
		return false, nil
	}
	was, known := e.k.ChatAlias(src.Platform, src.Profile, src.ChatID)
	created, err := e.k.AliasChat(ctx, src.Platform, src.Profile, src.ChatID, from)
	if err != nil {
		return false, abi.Errorf(abi.CodeUnavailable, "recording the chat migration: %v", err)
	}
	if created {
		e.log.Info("chat migrated; its conversations continue in the new chat", "plugin", plugin, "profile", profile,
			"from", from, "to", src.ChatID)
	} else if !known {
		e.log.Warn("chat migrated, but the new chat already has conversations of its own; they are kept apart",
			"plugin", plugin, "profile", profile, "from", from, "to", src.ChatID)
	}
	e.ledger.MigrateChat(ctx, plugin, profile, from, src.ChatID)
	return known && was != "", nil
}

// parseCommand is parseCommand that also knows the engine's extension commands.
func (e *Engine) parseCommand(text string) (string, string) {
	if cmd, arg := parseCommand(text); cmd != "" {
		return cmd, arg
	}
	word, arg := splitCommand(text)
	if _, ok := e.opt.Commands[word]; ok {
		return word, arg
	}
	return "", ""
}

// splitCommand splits "/cmd@bot arg" into ("cmd", "arg"), whatever the command.
func splitCommand(text string) (string, string) {
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "/") {
		return "", ""
	}
	word, arg, _ := strings.Cut(text[1:], " ")
	word, _, _ = strings.Cut(word, "@")
	return strings.ToLower(word), strings.TrimSpace(arg)
}

// parseCommand splits "/cmd@bot arg" into ("cmd", "arg") for the engine's own commands; "" when
// the text is not one.
func parseCommand(text string) (string, string) {
	word, arg := splitCommand(text)
	switch word {
	case "new", "reset", "stop", "resume", "branch", "compress", "status", "sessions", "more", "last",
		"help", "model", "usage", "retry", "undo":
		return word, arg
	}
	return "", ""
}

// cut carries out /stop, /new and /reset (cmd) inside key's boundary b. The queued work the
// command cancels is taken off the chat's queue first (/stop keeps queued notifications). The
// transition then commits in one transaction together with the record of everything it
// cancels: each dropped turn's inbox row, a ledger drop record for each dropped notification,
// the interruption of the running turn, the command's own row and its confirmation. Only after
// that commit is the running turn's context cancelled. If the transition fails, the queued
// work goes back and nothing is cancelled.
func (e *Engine) cut(b *session.Boundary, key string, row *inboxRow, cmd, title string) (session.Route, error) {
	by := "/" + cmd
	confirm := "⏹ Stopped."
	if cmd != "stop" {
		confirm = "✨ New conversation started."
	}
	queued, running := e.detach(key, cmd != "stop")
	var lt *delivery.Tx
	record := func(tx *sql.Tx) error {
		ctx := b.Context()
		lt = e.ledger.In(tx)
		for _, it := range queued {
			if _, err := e.settle(ctx, lt, key, it, stDropped, "cancelled by "+by+" before it ran", stQueued); err != nil {
				return err
			}
		}
		if running != nil {
			to := stInterrupted
			if running.kind == kindNotification {
				to = stDropped
			}
			// Still queued counts: its runner may not have marked it running yet.
			if _, err := e.settle(ctx, lt, key, running, to, "interrupted by "+by, stRunning, stQueued); err != nil {
				return err
			}
		}
		if _, err := e.setState(ctx, tx, []string{row.id}, stDone, "command "+by, stReceived); err != nil {
			return err
		}
		_, err := lt.Enqueue(ctx, e.noticeMsg(row.plugin, row.profile, key, row.src, confirm))
		return err
	}
	var (
		r   session.Route
		err error
	)
	if cmd == "stop" {
		r, err = b.Stop(record)
	} else {
		r, err = b.Reset(title, record)
	}
	if err != nil {
		e.putBack(key, queued)
		return r, err
	}
	lt.Committed()
	if cmd != "stop" {
		e.setMore(key, nil) // the rest of an answer of the old conversation
	}
	e.cancelRunning(key, running, by)
	return r, nil
}

// detach takes the queued turns a /new (all) or /stop (user messages only) cancels off key's
// queue and returns them with the running turn. Nothing is cancelled yet.
func (e *Engine) detach(key string, all bool) (taken []*item, running *item) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kq := e.keys[key]
	if kq == nil {
		return nil, nil
	}
	var keep []*item
	for _, it := range kq.items {
		if !all && it.kind == kindNotification {
			keep = append(keep, it)
			continue
		}
		taken = append(taken, it)
	}
	kq.items = keep
	return taken, kq.running
}

// putBack returns detached turns to the front of key's queue (their command failed).
func (e *Engine) putBack(key string, items []*item) {
	if len(items) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	kq := e.queueLocked(key)
	kq.items = append(append([]*item(nil), items...), kq.items...)
	e.serveLocked(key, kq)
}

// cancelRunning cancels it, if it is still key's running turn, with the command as the cause.
func (e *Engine) cancelRunning(key string, it *item, by string) {
	if it == nil {
		return
	}
	e.mu.Lock()
	var cancel context.CancelCauseFunc
	if kq := e.keys[key]; kq != nil && kq.running == it {
		cancel = kq.cancel
	}
	e.mu.Unlock()
	if cancel != nil {
		cancel(&interrupted{by: by})
	}
}

// recall handles a message its sender recalled (the transcript is already redacted): a queued
// turn forgets it (and leaves the queue when nothing else is left in it), and a running turn
// that answers it is interrupted. As with /stop, the outcomes are recorded first and the running
// turn is cancelled after. Called inside key's boundary.
func (e *Engine) recall(key, msgID string) {
	if msgID == "" {
		return
	}
	e.mu.Lock()
	kq := e.keys[key]
	if kq == nil {
		e.mu.Unlock()
		return
	}
	var running *item
	if r := kq.running; r != nil && r.kind == kindMessage && slices.Contains(r.msgIDs, msgID) {
		running = r
	}
	var dropped []string
	for _, it := range kq.items {
		if it.kind != kindMessage || len(it.msgIDs) != len(it.ids) {
			continue
		}
		for i := 0; i < len(it.msgIDs); i++ {
			if it.msgIDs[i] == msgID {
				dropped = append(dropped, it.ids[i])
				it.ids = slices.Delete(it.ids, i, i+1)
				it.texts = slices.Delete(it.texts, i, i+1)
				it.msgIDs = slices.Delete(it.msgIDs, i, i+1)
				i--
			}
		}
	}
	kq.items = slices.DeleteFunc(kq.items, func(it *item) bool { return len(it.ids) == 0 })
	e.mu.Unlock()
	if len(dropped) == 0 && running == nil {
		return
	}
	err := e.write(func(ctx context.Context, t *delivery.Tx) error {
		if _, err := e.setState(ctx, t.SQL(), dropped, stDropped, "recalled by the sender before its turn", stQueued); err != nil {
			return err
		}
		if running == nil {
			return nil
		}
		// Still queued counts: its runner may not have marked it running yet.
		_, err := e.settle(ctx, t, key, running, stInterrupted, "interrupted: the sender recalled the message", stRunning, stQueued)
		return err
	})
	if err != nil {
		e.log.Error("turn: recording a recall failed", "key", key, "error", err)
	}
	e.cancelRunning(key, running, "a recall")
}

// enqueue adds it to key's queue, merging consecutive user messages (one pending slot) and
// notifications of the same conversation (one consolidated turn), and makes sure a runner
// serves the queue.
func (e *Engine) enqueue(key string, it *item) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kq := e.queueLocked(key)
	if n := len(kq.items); n > 0 {
		last := kq.items[n-1]
		mergeable := last.kind == it.kind && last.cmd == "" && it.cmd == "" &&
			(it.kind == kindMessage || last.stamps[0].SessionID == it.stamps[0].SessionID)
		if mergeable {
			last.ids = append(last.ids, it.ids...)
			last.texts = append(last.texts, it.texts...)
			last.msgIDs = append(last.msgIDs, it.msgIDs...)
			last.stamps = append(last.stamps, it.stamps...)
			last.events = append(last.events, it.events...)
			last.notices = append(last.notices, it.notices...)
			if it.kind == kindMessage {
				last.src = it.src
			}
			return
		}
	}
	kq.items = append(kq.items, it)
	e.serveLocked(key, kq)
}

func (e *Engine) queueLocked(key string) *keyQueue {
	kq := e.keys[key]
	if kq == nil {
		kq = &keyQueue{}
		e.keys[key] = kq
	}
	return kq
}

// serveLocked starts kq's runner unless one is active. e.mu must be held.
func (e *Engine) serveLocked(key string, kq *keyQueue) {
	if kq.active || len(kq.items) == 0 {
		return
	}
	kq.active = true
	e.wg.Add(1)
	go e.runKey(key, kq)
}

// runKey runs key's queued turns one at a time until the queue is empty. Each turn records its
// own outcome (see end); a /stop or /new records the interruption of the turn it cancels.
func (e *Engine) runKey(key string, kq *keyQueue) {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		if len(kq.items) == 0 || e.ctx.Err() != nil {
			kq.active, kq.running, kq.cancel = false, nil, nil
			if len(kq.items) == 0 && e.keys[key] == kq {
				delete(e.keys, key)
			}
			e.mu.Unlock()
			return
		}
		it := kq.items[0]
		kq.items = kq.items[1:]
		ctx, cancel := context.WithCancelCause(e.ctx)
		kq.running, kq.cancel = it, cancel
		e.mu.Unlock()

		if testHookPopped != nil {
			testHookPopped(it)
		}
		if e.begin(key, it) {
			e.run(ctx, key, it)
		}
		cancel(nil)
		e.mu.Lock()
		kq.running, kq.cancel = nil, nil
		e.mu.Unlock()
	}
}

// testHookPopped, when set by a test, runs in a chat's runner right after it took a turn off
// the queue, before the turn is marked running.
var testHookPopped func(*item)

// begin marks it's inbox rows running. Rows that are no longer queued (a /new recorded them
// dropped meanwhile) leave the turn; it reports whether anything is left to run.
func (e *Engine) begin(key string, it *item) bool {
	var moved []string
	err := e.write(func(ctx context.Context, t *delivery.Tx) error {
		var err error
		moved, err = e.setState(ctx, t.SQL(), it.ids, stRunning, "", stQueued)
		return err
	})
	if err != nil {
		// The store is failing: try the turn again later rather than run it unrecorded.
		e.log.Error("turn: starting a turn failed; retrying later", "key", key, "error", err)
		e.later(key, it, e.opt.RetryBase)
		return false
	}
	if len(moved) < len(it.ids) {
		it.keep(moved)
	}
	return len(it.ids) > 0
}

// keep narrows it to the inbox rows ids.
func (it *item) keep(ids []string) {
	in := map[string]bool{}
	for _, id := range ids {
		in[id] = true
	}
	var n int
	for i, id := range it.ids {
		if !in[id] {
			continue
		}
		it.ids[n] = id
		if it.kind == kindNotification {
			it.texts[n], it.stamps[n], it.events[n], it.notices[n] = it.texts[i], it.stamps[i], it.events[i], it.notices[i]
		}
		n++
	}
	it.ids = it.ids[:n]
	if it.kind == kindNotification {
		it.texts, it.stamps, it.events, it.notices = it.texts[:n], it.stamps[:n], it.events[:n], it.notices[:n]
	}
}

// later queues it again after d, behind whatever the chat has queued by then.
func (e *Engine) later(key string, it *item, d time.Duration) {
	time.AfterFunc(d, func() {
		if e.ctx.Err() == nil {
			e.enqueue(key, it)
		}
	})
}

func (e *Engine) run(ctx context.Context, key string, it *item) {
	switch {
	case it.kind == kindNotification:
		e.synthetic(ctx, key, it)
	case e.opt.Commands[it.cmd] != nil:
		e.extension(ctx, key, it, e.opt.Commands[it.cmd])
	case it.cmd != "":
		e.command(ctx, key, it)
	default:
		e.foreground(ctx, key, it)
	}
}

// foreground runs the agent on the user's (merged) message and queues its answer, guarded by the
// session and generation the turn started at.
func (e *Engine) foreground(ctx context.Context, key string, it *item) {
	var st session.Stamp
	err := e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		var err error
		st, err = b.Stamp(it.src)
		return err
	})
	if ctx.Err() != nil {
		return // interrupted (the command recorded it) or the host is stopping (Start reports it)
	}
	if err != nil {
		n := e.noticeMsg(it.plugin, it.profile, key, it.src, "⚠️ I could not open this conversation; please try again.")
		e.end(key, it, stFailed, "no session: "+err.Error(), &n, stRunning)
		return
	}
	target := outbound(it.src)
	if it.src.ChatType != abi.ChatDM {
		target.ReplyTo = it.src.MessageID
	}
	turnID := it.ids[len(it.ids)-1]
	var stream *streamer
	defer func() {
		if stream != nil {
			stream.halt()
		}
	}()
	var rep *agent.Reply
	for attempt := 1; ; attempt++ {
		t := &agent.Turn{
			Key: key, SessionID: st.SessionID, Source: it.src, Text: strings.Join(it.texts, "\n"),
			History: e.history(ctx, st.SessionID, it.ids), Tools: e.tools(ctx, it, key, st, false),
			Model: e.sessionModel(ctx, st.SessionID),
		}
		if e.opt.CanEdit != nil && e.opt.CanEdit(it.plugin) {
			stream = e.newStreamer(key, streamMessage(it.plugin, it.profile, key, target, st, "turn:"+it.ids[0]))
			t.OnText = stream.update
		}
		stopTyping := e.typing(ctx, it)
		if onText := t.OnText; onText != nil {
			t.OnText = func(text string) { stopTyping(); onText(text) } // the streamed answer shows instead
		}
		rep, err = e.agent.Turn(ctx, t)
		stopTyping()
		if ctx.Err() != nil {
			var by *interrupted
			if stream != nil && errors.As(context.Cause(ctx), &by) {
				stream.finishStopped() // the draft says so instead of looking unfinished
			}
			return
		}
		if attempt > 1 || !errors.Is(err, agent.ErrContextOverflow) || (stream != nil && stream.started()) {
			break
		}
		// The conversation does not fit the model's context: compress it, as /compress does
		// (this turn's message goes on in the continuation), and try once more there.
		e.log.Info("turn: the model's context overflowed; compressing the conversation and trying again", "key", key, "error", err)
		r, ok := e.compressNow(ctx, key, it, it.ids, func(count int, r session.Route) string {
			return fmt.Sprintf(OverflowCompressed, count, r.SessionID)
		})
		if !ok {
			break
		}
		if stream != nil {
			stream.halt()
			stream = nil
		}
		err = e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
			var err error
			st, err = b.Stamp(it.src)
			return err
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil || st.SessionID != r.SessionID {
			n := e.noticeMsg(it.plugin, it.profile, key, it.src, "⚠️ I could not continue this conversation after compressing it; please try again.")
			e.end(key, it, stFailed, fmt.Sprintf("compressed after a context overflow; the continuation could not be stamped: %v", err), &n, stRunning)
			return
		}
	}
	state, outcome, text := stDone, "", ""
	switch {
	case err != nil:
		state, outcome, text = stFailed, "agent: "+err.Error(), "⚠️ "+agent.UserMessage(err)
	case rep != nil:
		text = rep.Text
		e.record(ctx, key, st.SessionID, turnID, turnMessages(rep), rep.Usage)
		// Between this turn and the chat's next one: compress if the conversation is crowded.
		defer e.afterTurn(ctx, key, it, rep)
	}
	if strings.TrimSpace(text) == "" {
		e.end(key, it, state, "no answer", nil, stRunning)
		return
	}
	parts, rest := e.capParts(it.plugin, text)
	var link string
	if stream != nil {
		if stream.finish(parts) {
			e.end(key, it, state, strings.TrimPrefix(outcome+"; answered (streamed)", "; "), nil, stRunning)
			return
		}
		if link = stream.completes(); link != "" {
			// The draft may be in the chat, cut off: the answer says it completes it.
			parts, rest = e.capParts(it.plugin, DraftResumed+"\n"+text)
			outcome = strings.TrimPrefix(outcome+"; the streamed draft "+link+" has an unknown outcome", "; ")
		}
	}
	e.setMore(key, &pending{text: rest, plugin: it.plugin, profile: it.profile, target: outbound(it.src), stamp: st})
	e.end(key, it, state, outcome, &delivery.Message{
		Plugin: it.plugin, Profile: it.profile, Key: key, Target: target, Text: text, Parts: parts, Kind: delivery.KindReply,
		Guard: delivery.GuardWork, Stamp: st, Generation: st.Generation, Origin: "turn:" + it.ids[0], Link: link,
	}, stRunning)
}

// typing shows "typing" in the turn's chat until the returned stop is called (see
// Options.Typing). stop does not wait for a chat action in flight: the answer is not held back
// by a slow platform.
func (e *Engine) typing(ctx context.Context, it *item) (stop func()) {
	if e.opt.Typing == nil {
		return func() {}
	}
	done := make(chan struct{})
	target := outbound(it.src)
	chat := it.plugin + "\x00" + it.profile + "\x00" + target.ChatID + "\x00" + target.ThreadID
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTimer(e.opt.TypingAfter)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if e.typingDue(chat) {
				e.opt.Typing.Typing(context.WithoutCancel(ctx), it.plugin, it.profile, target)
			}
			t.Reset(e.opt.TypingEvery)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// typingDue reports whether chat may be sent a chat action now (none in the last TypingEvery),
// and if so notes it as sent.
func (e *Engine) typingDue(chat string) bool {
	now := e.opt.Now()
	e.typingMu.Lock()
	defer e.typingMu.Unlock()
	if last, ok := e.typingLast[chat]; ok && now.Sub(last) < e.opt.TypingEvery {
		return false
	}
	if len(e.typingLast) >= 1024 {
		for c, last := range e.typingLast {
			if now.Sub(last) >= e.opt.TypingEvery {
				delete(e.typingLast, c)
			}
		}
	}
	e.typingLast[chat] = now
	return true
}

func outbound(src abi.Source) abi.OutboundMessage {
	return abi.OutboundMessage{ChatType: src.ChatType, ChatID: src.ChatID, ThreadID: src.ThreadID, UserID: src.UserID, ScopeID: src.ScopeID}
}

// errOvertaken: the turn's rows were no longer in the expected state (a /stop or /new recorded
// the turn's interruption first); what the turn wanted to record is discarded.
var errOvertaken = errors.New("turn: overtaken by a command")

// end records how it's turn ended, in one transaction: its inbox rows move from one of the
// from states to state with outcome, answer (if any) is queued in the ledger (the outcome says
// which message), and notifications that end dropped get their ledger drop records. A turn
// whose rows are no longer in a from state (a /stop or /new recorded its interruption first)
// writes nothing, and its answer is discarded.
func (e *Engine) end(key string, it *item, state, outcome string, answer *delivery.Message, from ...string) {
	err := e.write(func(ctx context.Context, t *delivery.Tx) error {
		out := outcome
		if answer != nil {
			g, err := t.Enqueue(ctx, *answer)
			if err != nil {
				return err
			}
			out = strings.TrimPrefix(out+"; answered "+g, "; ")
		}
		n, err := e.settle(ctx, t, key, it, state, out, from...)
		if err == nil && n == 0 {
			err = errOvertaken
		}
		return err
	})
	switch {
	case errors.Is(err, errOvertaken):
		e.log.Debug("turn: outcome already recorded by a command", "key", key, "ids", it.ids)
	case err != nil:
		// The rows stay as they were; Start deals with them after a restart.
		e.log.Error("turn: recording a turn's outcome failed", "key", key, "ids", it.ids, "state", state, "error", err)
	}
}

// settle moves it's inbox rows that are in one of the from states to state with outcome, and
// writes a ledger drop record for each notification row it drops. It returns how many rows moved.
func (e *Engine) settle(ctx context.Context, t *delivery.Tx, key string, it *item, state, outcome string, from ...string) (int, error) {
	moved, err := e.setState(ctx, t.SQL(), it.ids, state, outcome, from...)
	if err != nil || state != stDropped || it.kind != kindNotification {
		return len(moved), err
	}
	in := map[string]bool{}
	for _, id := range moved {
		in[id] = true
	}
	for i, id := range it.ids {
		if !in[id] {
			continue
		}
		if _, err := t.Record(ctx, e.dropRecord(key, it, i), delivery.Dropped, outcome); err != nil {
			return 0, err
		}
	}
	return len(moved), nil
}

// dropRecord is the ledger's record of notification i of it, which will not be delivered.
func (e *Engine) dropRecord(key string, it *item, i int) delivery.Message {
	st := it.stamps[i]
	origin, _, _ := strings.Cut(it.events[i], "#")
	return delivery.Message{Plugin: it.plugin, Profile: it.profile, Key: key, Target: outbound(st.Route),
		Text: it.texts[i], Kind: delivery.KindNotification, Guard: delivery.GuardLineage, Stamp: st, Origin: origin}
}

// writeAttempts bounds the retries of one durable write while the store fails.
const writeAttempts = 5

// write runs fn in one transaction (ledger rows through t, everything else through t.SQL()),
// retrying with backoff while the store fails. errOvertaken is not retried.
func (e *Engine) write(fn func(ctx context.Context, t *delivery.Tx) error) error {
	ctx := context.WithoutCancel(e.ctx)
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := e.ledger.Update(ctx, func(t *delivery.Tx) error { return fn(ctx, t) })
		if err == nil || errors.Is(err, errOvertaken) || attempt == writeAttempts || e.ctx.Err() != nil {
			return err
		}
		e.log.Warn("turn: write failed; retrying", "attempt", attempt, "error", err)
		time.Sleep(wait)
		wait *= 2
	}
}

// notice sends a host message into the chat (a command confirmation, an error), unguarded: it
// answers something the user just did.
func (e *Engine) notice(ctx context.Context, plugin, profile, key string, src abi.Source, text string) {
	if _, err := e.ledger.Enqueue(context.WithoutCancel(ctx), e.noticeMsg(plugin, profile, key, src, text)); err != nil {
		e.log.Error("turn: notice not recorded", "key", key, "error", err)
	}
}

func (e *Engine) noticeMsg(plugin, profile, key string, src abi.Source, text string) delivery.Message {
	return delivery.Message{Plugin: plugin, Profile: profile, Key: key, Target: outbound(src), Text: text, Kind: delivery.KindNotice}
}
