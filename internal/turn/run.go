package turn

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Running: a key's runner takes its queued turns one at a time and runs each (a foreground
// turn here, a command in commands.go, a notification turn in notify.go); every turn records
// its own outcome (records.go).

// runKey runs key's queued turns one at a time until the queue is empty. Each turn records its
// own outcome (see end); a /stop or /new records the interruption of the turn it cancels.
func (e *Engine) runKey(key string, kq *keyQueue) {
	defer e.wg.Done()
	for {
		e.queues.mu.Lock()
		if len(kq.items) == 0 || e.ctx.Err() != nil || e.queues.draining {
			// Draining, the queued turns stay queued in the inbox: the next start runs them.
			kq.active, kq.running, kq.cancel = false, nil, nil
			if len(kq.items) == 0 && e.queues.keys[key] == kq {
				delete(e.queues.keys, key)
			}
			e.queues.active--
			close(e.queues.changed)
			e.queues.changed = make(chan struct{})
			e.queues.mu.Unlock()
			return
		}
		it := kq.items[0]
		kq.items = kq.items[1:]
		ctx, cancel := context.WithCancelCause(e.ctx)
		kq.running, kq.cancel = it, cancel
		e.queues.mu.Unlock()

		if testHookPopped != nil {
			testHookPopped(it)
		}
		if e.begin(key, it) {
			if testHookBegun != nil {
				testHookBegun(it)
			}
			e.run(ctx, key, it)
			if errors.Is(context.Cause(ctx), errDraining) {
				e.handBack(key, it)
			}
		}
		cancel(nil)
		e.queues.mu.Lock()
		kq.running, kq.cancel = nil, nil
		e.queues.mu.Unlock()
	}
}

// testHookPopped, when set by a test, runs in a chat's runner right after it took a turn off
// the queue, before the turn is marked running.
var testHookPopped func(*item)

// testHookBegun, when set by a test, runs in a chat's runner after the turn's rows were marked
// running, before the turn runs (and stamps).
var testHookBegun func(*item)

// testHookAnswered, when set by a test, runs in a chat's runner after the agent answered a
// message turn (not interrupted meanwhile), before the answer is recorded.
var testHookAnswered func(*item)

// begin marks it's inbox rows running. Rows that are no longer queued (a /new recorded them
// dropped meanwhile) leave the turn; it reports whether anything is left to run.
func (e *Engine) begin(key string, it *item) bool {
	var moved []string
	err := e.write(func(ctx context.Context, t *store.Tx) error {
		var err error
		moved, err = e.setState(ctx, t, it.ids(), stRunning, "", stQueued)
		return err
	})
	if err != nil {
		// The store is failing: try the turn again later rather than run it unrecorded.
		e.log.Error("turn: starting a turn failed; retrying later", "key", key, "error", err)
		e.later(key, it, e.opt.RetryBase)
		return false
	}
	if len(moved) < len(it.entries) {
		it.keep(moved)
	}
	if len(it.entries) > 0 {
		e.opt.Metrics.start(it)
	}
	return len(it.entries) > 0
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
	var (
		st   session.Stamp
		gone bool // the turn's rows are no longer this host's running rows
	)
	// The stamp is taken together with the check that the rows are still this host's and
	// running: a user's command on another host that cancelled them (cancelElsewhere) either
	// committed before, and the turn does not run, or after, and the stamp it answers with is
	// stale for the ledger's guard.
	stamp := func(b *session.Boundary) error {
		var err error
		if st, err = b.Stamp(it.src); err != nil {
			return err
		}
		ok, err := e.holds(b.Context(), e.db, it.ids(), stRunning)
		gone = !ok
		return err
	}
	err := e.k.WithBoundary(ctx, key, stamp)
	if ctx.Err() != nil {
		return // interrupted (the command recorded it) or the host is stopping (Start reports it)
	}
	if err == nil && gone {
		e.log.Debug("turn: the turn's rows were cancelled or taken over before it ran", "key", key, "ids", it.ids())
		return
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
	turnID := it.last()
	it.before, it.after = nil, nil
	atts := e.attachments(ctx, key, it, st) // outside the boundary: a plugin call
	if ctx.Err() != nil {
		return // interrupted while fetching (the command recorded it): nothing of it is sent
	}
	if len(atts) == 0 && len(it.before) > 0 && strings.TrimSpace(strings.Join(it.texts(), "")) == "" {
		// Only files, every one refused: their lines are the answer; the agent is not asked
		// about a message that holds nothing it may see.
		e.end(key, it, stDone, "every attachment refused", nil, stRunning)
		return
	}
	var stream *streamer
	defer func() {
		if stream != nil {
			stream.halt()
		}
	}()
	var rep *agent.Reply
	for attempt := 1; ; attempt++ {
		t := &agent.Turn{
			Key: key, SessionID: st.SessionID, Source: it.src, Text: strings.Join(it.texts(), "\n"),
			History: e.history(ctx, st.SessionID, it.ids()), Tools: e.tools(ctx, it, key, st, false),
			Model: e.sessionModel(ctx, st.SessionID), Attachments: atts,
		}
		if e.opt.CanEdit != nil && e.opt.CanEdit(it.plugin) {
			stream = e.newStreamer(key, streamMessage(it.plugin, it.profile, key, target, st, "turn:"+it.first()), it.ids())
			t.OnText = stream.update
		}
		stopTyping := e.typing(ctx, it)
		if onText := t.OnText; onText != nil {
			t.OnText = func(text string) {
				it.acted.Store(true) // a draft may be in the chat: the turn is not run again (Drain)
				stopTyping()         // the streamed answer shows instead
				onText(text)
			}
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
		r, ok := e.compressNow(ctx, key, it, it.ids(), func(count int, r session.Route) string {
			return fmt.Sprintf(OverflowCompressed, count, r.SessionID)
		})
		if !ok {
			break
		}
		if stream != nil {
			stream.halt()
			stream = nil
		}
		err = e.k.WithBoundary(ctx, key, stamp)
		if ctx.Err() != nil {
			return
		}
		if err == nil && gone {
			e.log.Debug("turn: the turn's rows were cancelled or taken over", "key", key, "ids", it.ids())
			return
		}
		if err != nil || st.SessionID != r.SessionID {
			n := e.noticeMsg(it.plugin, it.profile, key, it.src, "⚠️ I could not continue this conversation after compressing it; please try again.")
			e.end(key, it, stFailed, fmt.Sprintf("compressed after a context overflow; the continuation could not be stamped: %v", err), &n, stRunning)
			return
		}
	}
	if testHookAnswered != nil {
		testHookAnswered(it)
	}
	state, outcome, text := stDone, "", ""
	switch {
	case err != nil:
		state, outcome, text = stFailed, "agent: "+err.Error(), "⚠️ "+agent.UserMessage(err)
	case rep != nil:
		text = rep.Text
		e.record(ctx, key, st.SessionID, turnID, turnMessages(rep), rep.Usage)
		e.files(ctx, key, it, st, target, rep.Media)
		// Between this turn and the chat's next one: compress if the conversation is crowded.
		defer e.afterTurn(ctx, key, it, rep)
	}
	if strings.TrimSpace(text) == "" {
		e.end(key, it, state, strings.TrimPrefix(outcome+"; no answer", "; "), nil, stRunning)
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
		Guard: delivery.GuardWork, Stamp: st, Generation: st.Generation, Origin: "turn:" + it.first(), Link: link,
	}, stRunning)
}

func outbound(src abi.Source) abi.OutboundMessage {
	return abi.OutboundMessage{ChatType: src.ChatType, ChatID: src.ChatID, ThreadID: src.ThreadID, UserID: src.UserID, ScopeID: src.ScopeID}
}
