package turn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Intake: an inbound event is recorded in the inbox ("received") before its chat's boundary is
// taken, then applied under the boundary (a transcript entry, a queued turn, a command that acts
// at once): by Dispatch if the boundary comes free within IntakeWait, else by the chat's intake
// goroutine, in arrival order.

// intakes is the engine's recorded events that wait for their key's boundary. Its mutex is a
// leaf (see Engine).
type intakes struct {
	mu sync.Mutex // guards m and every intakeQueue in it
	m  map[string]*intakeQueue
}

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
	case abi.EventMessage, abi.EventObserve, abi.EventRedact, abi.EventSeed, abi.EventCallback:
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
		text: ev.Text, kind: kindMessage, eventKind: kind, attachments: e.inline(ev.Attachments)}
	if kind != abi.EventMessage {
		row.kind = kindRecord
	}
	if kind == abi.EventCallback {
		row.text = ev.CallbackID // what applying it needs: the button pressed
	}
	fresh, err := e.insert(ctx, e.db, row, stReceived)
	if err == nil && e.insertFault != nil {
		err = e.insertFault
	}
	store.Report(e.db, store.PathInbox, err)
	if err != nil {
		// The insert may have committed all the same (ctx cancelled while the commit ran): the
		// platform's retry would then be a duplicate, and the row would wait for the next
		// start. Find out once the store answers, and apply the row if it is there.
		e.wg.Add(1)
		go e.settleInsert(row)
		return abi.DispatchReply{}, abi.Errorf(abi.CodeUnavailable, "recording the event: %v", err)
	}
	if !fresh {
		return abi.DispatchReply{Duplicate: true}, nil
	}
	// Apply now if the chat has no earlier event waiting and its boundary is free soon enough.
	e.intake.mu.Lock()
	if q := e.intake.m[key]; q != nil {
		q.rows = append(q.rows, row) // behind the chat's earlier events
		e.intake.mu.Unlock()
		return abi.DispatchReply{}, nil
	}
	q := &intakeQueue{}
	e.intake.m[key] = q
	e.intake.mu.Unlock()
	ref, applied, err := e.apply(ctx, row, IntakeWait)
	if err != nil {
		e.log.Warn("turn: applying an inbound event failed; retrying in the background", "key", key, "id", row.id, "error", err)
	}
	e.intake.mu.Lock()
	if !applied {
		q.rows = append([]*inboxRow{row}, q.rows...)
	}
	if len(q.rows) > 0 {
		e.wg.Add(1)
		go e.runIntake(key, q)
	} else {
		delete(e.intake.m, key)
	}
	e.intake.mu.Unlock()
	return abi.DispatchReply{Session: ref}, nil
}

// inline keeps the bytes a platform delivered inline out of the inbox row when they are over
// the per-file cap: the attachment keeps their size, and its turn refuses it as too large.
func (e *Engine) inline(atts []abi.Attachment) []abi.Attachment {
	if e.opt.Media == nil {
		return atts
	}
	out := slices.Clone(atts)
	for i, a := range out {
		if n := int64(len(a.Data)); n > e.opt.Media.MaxFile() {
			out[i].Data, out[i].Size = nil, n
		}
	}
	return out
}

// settleInsert resolves the insert of row that failed with an error, which does not say whether
// it committed: it looks for the row (by its id, new to this insert) until the store answers or
// the engine stops, and applies it if it is there, as any recorded event. Without it, a row
// committed behind an error would wait, unapplied, for the next start of this host.
func (e *Engine) settleInsert(row *inboxRow) {
	defer e.wg.Done()
	for wait := 50 * time.Millisecond; ; wait = min(wait*2, 5*time.Second) {
		received, err := e.loadReceived(e.ctx, `id = $1`, row.id)
		if err == nil {
			if len(received) > 0 {
				e.log.Warn("turn: an inbound event whose recording reported an error was recorded after all; applying it",
					"key", row.key, "id", row.id, "event", row.eventID)
				e.applyLater(received)
			}
			return
		}
		select {
		case <-e.ctx.Done():
			return // the next start applies it, if it is there
		case <-time.After(wait):
		}
	}
}

// intakeQueue holds a chat's recorded inbound events that wait for its boundary. Guarded by
// intakes.mu; present in Engine.intake while a Dispatch applies an event of the chat or a
// runIntake goroutine drains the queue, so the chat's events are applied in arrival order.
type intakeQueue struct {
	rows []*inboxRow
}

// applyLater leaves recorded events (in arrival order) to their chats' intake goroutines,
// behind any event of the chat already waiting.
func (e *Engine) applyLater(received []*inboxRow) {
	e.intake.mu.Lock()
	for _, r := range received {
		q := e.intake.m[r.key]
		if q == nil {
			q = &intakeQueue{}
			e.intake.m[r.key] = q
			e.wg.Add(1)
			go e.runIntake(r.key, q)
		}
		q.rows = append(q.rows, r)
	}
	e.intake.mu.Unlock()
}

// runIntake applies key's waiting events in order, each under the boundary (waiting for it as
// long as it takes), retrying a failure with backoff until the engine stops; what it has not
// applied then is applied at the next start.
func (e *Engine) runIntake(key string, q *intakeQueue) {
	defer e.wg.Done()
	for {
		e.intake.mu.Lock()
		if len(q.rows) == 0 || e.ctx.Err() != nil {
			if e.intake.m[key] == q {
				delete(e.intake.m, key)
			}
			e.intake.mu.Unlock()
			return
		}
		row := q.rows[0]
		q.rows = q.rows[1:]
		e.intake.mu.Unlock()
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
		// Applied already (a row settleInsert found while its first attempt was still queued):
		// once is all. The boundary orders this check before the row's own change of state.
		if still, err := e.stillReceived(b.Context(), row.id); err != nil || !still {
			return err
		}
		if testHookApplying != nil {
			testHookApplying(row)
		}
		var res session.Resolution
		var err error
		outcome := ""
		switch row.eventKind {
		case abi.EventCallback:
			outcome = "callback " + row.text
			if id, approve, ok := approval.ParseButton(row.text); ok {
				confirm = e.answerApproval(b.Context(), key, src, id, approve)
			} else {
				outcome += ": not a button of this host"
				e.log.Warn("turn: a button press this host does not know was ignored", "key", key, "button", row.text)
			}
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
			if c, _ := e.parseCommand(row.text); c != "stop" && c != "new" && c != "reset" {
				// A /stop, /new or /reset the user sent after this message, applied before it (it
				// reached another host, or a host that took over a stopped one's rows applied it
				// first), cancels it as it would have had it come in order.
				by, err := e.cutAfter(b.Context(), row.id)
				if err != nil {
					return err
				}
				if by != "" {
					_, err := e.setState(b.Context(), e.db, []string{row.id}, stDropped, "cancelled by "+by+" (sent after it, applied before it)", stReceived)
					return err
				}
			}
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
			case "approve", "deny":
				// At once, not queued: the turn that asked is waiting for this answer.
				confirm = e.answerApproval(b.Context(), key, src, arg, cmd == "approve")
			default:
				submit = &item{kind: kindMessage, plugin: row.plugin, profile: row.profile, src: src, cmd: cmd, arg: arg,
					entries: []entry{{id: row.id, text: row.text, msgID: src.MessageID, attachments: row.attachments}}}
			}
		}
		if err != nil {
			return err
		}
		state := stDone
		switch {
		case outcome != "":
		case confirm != "":
			outcome = "command /" + cmd
		case submit != nil:
			state = stQueued
		}
		moved, err := e.setState(b.Context(), e.db, []string{row.id}, state, outcome, stReceived)
		if err != nil {
			return err
		}
		if len(moved) == 0 {
			// Another host adopted the row while this one was paused after the check above: the
			// row is that host's to apply, its turn and its answer too.
			submit, confirm = nil, ""
			return nil
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

// testHookApplying, when set by a test, runs while an event is applied, after the check that
// its row is still this host's to apply.
var testHookApplying func(*inboxRow)

// stillReceived reports whether the inbox row id is still waiting to be applied by this host.
func (e *Engine) stillReceived(ctx context.Context, id string) (bool, error) {
	var n int
	err := e.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM turn_inbox WHERE id = $1 AND state = $2 AND owner = $3`,
		id, stReceived, e.opt.Instance).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("turn: reading an inbound event's state: %w", err)
	}
	return n == 1, nil
}

// cutAfter returns the command (/stop, /new, /reset) of the same chat that was received after the
// recorded message id and has been applied already, or "" if there is none. Received is the
// receiving host's clock (inbox created_at): with several hosts, their clocks order the chat's
// events.
func (e *Engine) cutAfter(ctx context.Context, id string) (string, error) {
	var outcome string
	err := e.db.QueryRowContext(ctx, `SELECT c.outcome FROM turn_inbox m JOIN turn_inbox c ON c.session_key = m.session_key
		WHERE m.id = $1 AND c.id <> m.id AND c.kind = $2 AND c.state = $3 AND c.created_at > m.created_at
		AND c.outcome IN ('command /stop', 'command /new', 'command /reset') LIMIT 1`, id, kindMessage, stDone).Scan(&outcome)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("turn: looking for a later /stop, /new or /reset: %w", err)
	}
	return strings.TrimPrefix(outcome, "command "), nil
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
		"help", "model", "usage", "retry", "undo", "approve", "deny":
		return word, arg
	}
	return "", ""
}
