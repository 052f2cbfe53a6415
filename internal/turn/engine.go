// Package turn turns inbound events into turns and background-process events into
// notifications. It owns the inbox (durable inbound deduplication), one queue of turns per
// session key (one turn at a time; messages for a busy chat are merged; /stop, /new and /reset
// act at once), the slash commands, and the notification path: every process event is
// classified when it is picked up, and whatever it becomes (a text notice, or a synthetic turn
// of the agent) is delivered through the ledger's guarded send, which classifies it again inside
// the key's boundary immediately before the plugin's send.
package turn

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
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
}

// Engine runs turns.
type Engine struct {
	db     *sql.DB
	k      *session.Kernel
	ledger *delivery.Ledger
	agent  agent.Agent
	procs  *process.Registry
	router Router
	opt    Options
	log    *slog.Logger

	mu       sync.Mutex // guards keys, more and lastEdit
	keys     map[string]*keyQueue
	more     map[string]*pending  // the rest of a key's last cut answer (/more)
	lastEdit map[string]time.Time // a chat's last streamed post or edit
	wg       sync.WaitGroup
	ctx      context.Context
}

// keyQueue is one chat's turns. Guarded by Engine.mu.
type keyQueue struct {
	items   []*item
	running *item
	cancel  context.CancelFunc
}

// item is one queued turn: user messages (merged while the chat is busy), a queued slash
// command, or a batch of notifications of one conversation.
type item struct {
	kind            string // kindMessage or kindNotification
	ids             []string
	plugin, profile string
	src             abi.Source // where to answer (the latest message's source)
	texts           []string
	msgIDs          []string        // platform message ids of texts (user messages), for recalls
	cmd, arg        string          // a queued slash command
	stamps          []session.Stamp // notifications
	attempts        int
	// cancelled, when set, says why the running turn was cancelled (a recall); guarded by
	// Engine.mu.
	cancelled string
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
	return &Engine{db: db, k: k, ledger: l, agent: a, procs: procs, router: r, opt: opt, log: opt.Logger,
		keys: map[string]*keyQueue{}, more: map[string]*pending{}, lastEdit: map[string]time.Time{}, ctx: ctx}, nil
}

func newID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Start re-queues the turns a previous run left queued, reports the ones it interrupted, and
// starts consuming process events. It returns at once; the work stops when ctx is cancelled.
func (e *Engine) Start(ctx context.Context) error {
	e.ctx = ctx
	queued, running, err := e.loadOpen(ctx)
	if err != nil {
		return err
	}
	for _, r := range running {
		// The turn was running when the host stopped. Running it again could repeat its side
		// effects (a command it started), so the user is told instead.
		e.setState(ctx, []string{r.id}, stInterrupted, "the host restarted during this turn")
		if r.kind == kindMessage {
			e.notice(ctx, r.plugin, r.profile, r.key, r.src, "⚠️ I was restarted while answering your last message; please send it again.")
		}
	}
	for _, r := range queued {
		it := &item{kind: r.kind, ids: []string{r.id}, plugin: r.plugin, profile: r.profile, src: r.src, texts: []string{r.text},
			msgIDs: []string{r.src.MessageID}}
		if r.kind == kindNotification {
			it.stamps = []session.Stamp{r.stamp}
		} else {
			it.cmd, it.arg = parseCommand(r.text)
		}
		e.enqueue(r.key, it)
	}
	if e.procs != nil {
		e.wg.Add(1)
		go e.consume(ctx)
	}
	return nil
}

// Wait blocks until the engine's goroutines have stopped (after ctx is cancelled).
func (e *Engine) Wait() { e.wg.Wait() }

// Dispatch records an inbound event and acts on it: observe, redact and seed at once; a message
// becomes a turn (or, for /stop, /new and /reset, acts at once). The event's source must
// already carry the plugin's own platform and profile. Events are deduplicated by ev.ID.
func (e *Engine) Dispatch(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (abi.DispatchReply, error) {
	src := ev.Source
	key, err := e.k.Key(src)
	if err != nil {
		return abi.DispatchReply{}, abi.Errorf(abi.CodeBadRequest, "source: %v", err)
	}
	kind := ev.Kind
	if kind == "" {
		kind = abi.EventMessage
	}
	row := &inboxRow{id: newID("in_"), plugin: plugin, profile: profile, eventID: ev.ID, key: key, src: src, text: ev.Text, kind: kindMessage}
	var (
		reply   abi.DispatchReply
		submit  *item
		confirm string
	)
	err = e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		state := stQueued
		if kind != abi.EventMessage {
			row.kind, state = kindRecord, stDone
		}
		fresh, err := e.insert(b.Context(), row, state)
		if err != nil {
			return err
		}
		if !fresh {
			reply.Duplicate = true
			return nil
		}
		var res session.Resolution
		switch kind {
		case abi.EventObserve:
			if res, err = b.Resolve(src, session.ResolveOptions{Internal: true}); err != nil {
				return err
			}
			text := ev.Text
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
				e.recall(b.Context(), key, src.MessageID)
			}
		case abi.EventSeed:
			res, err = b.Resolve(src, session.ResolveOptions{Internal: true})
		case abi.EventMessage:
			if res, err = b.Resolve(src, session.ResolveOptions{}); err != nil {
				return err
			}
			if _, err = b.Append(res.SessionID, session.Message{Role: "user", Text: ev.Text, PlatformMessageID: src.MessageID, Turn: row.id}); err != nil {
				return err
			}
			cmd, arg := parseCommand(ev.Text)
			switch cmd {
			case "stop":
				e.interrupt(key, true)
				res.Route, err = b.Stop()
				confirm = "⏹ Stopped."
			case "new", "reset":
				e.interrupt(key, false)
				res.Route, err = b.Reset(arg)
				confirm = "✨ New conversation started."
			case "status":
				confirm = e.status(b, key)
			default:
				submit = &item{kind: kindMessage, ids: []string{row.id}, plugin: plugin, profile: profile, src: src,
					texts: []string{ev.Text}, msgIDs: []string{src.MessageID}, cmd: cmd, arg: arg}
			}
			if confirm != "" && err == nil {
				e.setState(b.Context(), []string{row.id}, stDone, "command /"+cmd)
			}
		default:
			return abi.Errorf(abi.CodeBadRequest, "unknown event kind %q", kind)
		}
		reply.Session = res.Ref()
		return err
	})
	if err != nil {
		if abi.CodeOf(err) != "" {
			return reply, err
		}
		return reply, abi.Errorf(abi.CodeUnavailable, "recording the event: %v", err)
	}
	if confirm != "" {
		e.notice(ctx, plugin, profile, key, src, confirm)
	}
	if submit != nil {
		e.enqueue(key, submit)
	}
	return reply, nil
}

// parseCommand splits "/cmd@bot arg" into ("cmd", "arg"); "" when the text is not a command.
func parseCommand(text string) (string, string) {
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "/") {
		return "", ""
	}
	word, arg, _ := strings.Cut(text[1:], " ")
	word, _, _ = strings.Cut(word, "@")
	word = strings.ToLower(word)
	switch word {
	case "new", "reset", "stop", "resume", "branch", "compress", "status", "sessions", "more":
		return word, strings.TrimSpace(arg)
	}
	return "", ""
}

// interrupt cancels key's running turn and drops its queued user messages; queued
// notifications survive a /stop (keep) but not a /new.
func (e *Engine) interrupt(key string, keepNotifications bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !keepNotifications {
		delete(e.more, key) // the rest of an answer of the old conversation
	}
	kq := e.keys[key]
	if kq == nil {
		return
	}
	if kq.cancel != nil {
		kq.cancel()
	}
	var keep []*item
	for _, it := range kq.items {
		if it.kind == kindNotification && keepNotifications {
			keep = append(keep, it)
			continue
		}
		e.setState(e.ctx, it.ids, stDropped, "superseded by /stop or /new")
		if it.kind == kindNotification {
			e.recordDropped(e.ctx, key, it, "cancelled: the conversation was reset before the notification turn ran")
		}
	}
	kq.items = keep
}

// recall handles a message its sender recalled (the transcript is already redacted): a running
// turn that answers it is cancelled, and a queued one forgets it (and is dropped when nothing
// else is left in it). Called inside key's boundary, like interrupt.
func (e *Engine) recall(ctx context.Context, key, msgID string) {
	if msgID == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	kq := e.keys[key]
	if kq == nil {
		return
	}
	const why = "cancelled: the sender recalled the message"
	if r := kq.running; r != nil && r.kind == kindMessage && kq.cancel != nil && slices.Contains(r.msgIDs, msgID) {
		r.cancelled = why
		kq.cancel()
	}
	keep := kq.items[:0]
	for _, it := range kq.items {
		if it.kind == kindMessage && len(it.msgIDs) == len(it.ids) {
			for i := 0; i < len(it.msgIDs); i++ {
				if it.msgIDs[i] != msgID {
					continue
				}
				e.setState(ctx, it.ids[i:i+1], stDropped, "recalled by the sender before its turn")
				it.ids = slices.Delete(it.ids, i, i+1)
				it.texts = slices.Delete(it.texts, i, i+1)
				it.msgIDs = slices.Delete(it.msgIDs, i, i+1)
				i--
			}
			if len(it.ids) == 0 {
				continue
			}
		}
		keep = append(keep, it)
	}
	kq.items = keep
}

// enqueue adds it to key's queue, merging consecutive user messages (one pending slot) and
// notifications of the same conversation (one consolidated turn), and starts the key's runner.
func (e *Engine) enqueue(key string, it *item) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kq := e.keys[key]
	if kq == nil {
		kq = &keyQueue{}
		e.keys[key] = kq
	}
	if n := len(kq.items); n > 0 {
		last := kq.items[n-1]
		mergeable := last.kind == it.kind && last.cmd == "" && it.cmd == "" &&
			(it.kind == kindMessage || last.stamps[0].SessionID == it.stamps[0].SessionID)
		if mergeable {
			last.ids = append(last.ids, it.ids...)
			last.texts = append(last.texts, it.texts...)
			last.msgIDs = append(last.msgIDs, it.msgIDs...)
			last.stamps = append(last.stamps, it.stamps...)
			if it.kind == kindMessage {
				last.src = it.src
			}
			return
		}
	}
	kq.items = append(kq.items, it)
	if kq.running == nil && len(kq.items) == 1 {
		e.wg.Add(1)
		go e.runKey(key, kq)
	}
}

// runKey runs key's queued turns one at a time until the queue is empty.
func (e *Engine) runKey(key string, kq *keyQueue) {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		if len(kq.items) == 0 || e.ctx.Err() != nil {
			kq.running, kq.cancel = nil, nil
			if len(kq.items) == 0 && e.keys[key] == kq {
				delete(e.keys, key)
			}
			e.mu.Unlock()
			return
		}
		it := kq.items[0]
		kq.items = kq.items[1:]
		ctx, cancel := context.WithCancel(e.ctx)
		kq.running, kq.cancel = it, cancel
		e.mu.Unlock()

		e.setState(ctx, it.ids, stRunning, "")
		state, outcome := e.run(ctx, key, it)
		cancel()
		if ctx.Err() != nil && e.ctx.Err() == nil && state == stDone {
			state, outcome = stInterrupted, "cancelled by /stop or /new"
		}
		e.mu.Lock()
		if why := it.cancelled; why != "" && ctx.Err() != nil && e.ctx.Err() == nil {
			state, outcome = stInterrupted, why
		}
		e.mu.Unlock()
		if it.kind == kindNotification && state == stDropped && strings.HasPrefix(outcome, "cancelled") {
			e.recordDropped(e.ctx, key, it, outcome)
		}
		if state != "" {
			e.setState(e.ctx, it.ids, state, outcome)
		}
		e.mu.Lock()
		kq.running, kq.cancel = nil, nil
		e.mu.Unlock()
	}
}

func (e *Engine) run(ctx context.Context, key string, it *item) (string, string) {
	switch {
	case it.kind == kindNotification:
		return e.synthetic(ctx, key, it)
	case it.cmd != "":
		return e.command(ctx, key, it)
	}
	return e.foreground(ctx, key, it)
}

// foreground runs the agent on the user's (merged) message and queues its answer, guarded by the
// session and generation the turn started at.
func (e *Engine) foreground(ctx context.Context, key string, it *item) (string, string) {
	var st session.Stamp
	err := e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		var err error
		st, err = b.Stamp(it.src)
		return err
	})
	if err != nil {
		return stDone, "no session: " + err.Error()
	}
	target := outbound(it.src)
	if it.src.ChatType != abi.ChatDM {
		target.ReplyTo = it.src.MessageID
	}
	turnID := it.ids[len(it.ids)-1]
	t := &agent.Turn{
		Key: key, SessionID: st.SessionID, Source: it.src, Text: strings.Join(it.texts, "\n"),
		History: e.history(ctx, st.SessionID, it.ids), Tools: &tools{e: e, key: key, stamp: st},
	}
	var stream *streamer
	if e.opt.CanEdit != nil && e.opt.CanEdit(it.plugin) {
		stream = e.newStreamer(key, streamMessage(it.plugin, it.profile, key, target, st, "turn:"+it.ids[0]))
		t.OnText = stream.update
		defer stream.halt()
	}
	rep, err := e.agent.Turn(ctx, t)
	if ctx.Err() != nil {
		return stInterrupted, "cancelled by /stop or /new"
	}
	text := ""
	if err != nil {
		text = "⚠️ " + agent.UserMessage(err)
	} else if rep != nil {
		text = rep.Text
		e.record(ctx, key, st.SessionID, turnID, turnMessages(rep))
	}
	if strings.TrimSpace(text) == "" {
		return stDone, "no answer"
	}
	parts, rest := e.capParts(it.plugin, text)
	e.setMore(key, &pending{text: rest, plugin: it.plugin, profile: it.profile, target: outbound(it.src), stamp: st})
	if stream != nil && stream.finish(parts) {
		return stDone, "answered (streamed)"
	}
	id, err := e.ledger.Enqueue(context.WithoutCancel(ctx), delivery.Message{
		Plugin: it.plugin, Profile: it.profile, Key: key, Target: target, Text: text, Parts: parts, Kind: delivery.KindReply,
		Guard: delivery.GuardWork, Stamp: st, Generation: st.Generation, Origin: "turn:" + it.ids[0],
	})
	if err != nil {
		return stDone, "answer not recorded: " + err.Error()
	}
	return stDone, "answered " + id
}

func outbound(src abi.Source) abi.OutboundMessage {
	return abi.OutboundMessage{ChatType: src.ChatType, ChatID: src.ChatID, ThreadID: src.ThreadID, UserID: src.UserID, ScopeID: src.ScopeID}
}

// recordDropped writes a notification that will not be delivered to the ledger as dropped, with
// its text and the reason: a dropped notification is never silent.
func (e *Engine) recordDropped(ctx context.Context, key string, it *item, reason string) {
	for _, st := range it.stamps {
		if _, err := e.ledger.Record(context.WithoutCancel(ctx), delivery.Message{Plugin: it.plugin, Profile: it.profile, Key: key,
			Target: outbound(st.Route), Text: batchText(it.texts), Kind: delivery.KindNotification,
			Guard: delivery.GuardLineage, Stamp: st}, delivery.Dropped, reason); err != nil {
			e.log.Error("turn: recording a dropped notification failed", "key", key, "error", err)
		}
	}
}

// notice sends a host message into the chat (a command confirmation, an error), unguarded: it
// answers something the user just did.
func (e *Engine) notice(ctx context.Context, plugin, profile, key string, src abi.Source, text string) {
	if _, err := e.ledger.Enqueue(context.WithoutCancel(ctx), delivery.Message{
		Plugin: plugin, Profile: profile, Key: key, Target: outbound(src), Text: text, Kind: delivery.KindNotice,
	}); err != nil {
		e.log.Error("turn: notice not recorded", "key", key, "error", err)
	}
}
