package turn

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/session"
)

// Automatic compression. A conversation that grows past Options.CompressAt of the model's
// context window (agent.Windowed) is compressed between turns: right after the turn whose
// answer took it there has recorded its outcome, before the chat's next queued item runs, and
// never while a turn runs. A model call refused because the conversation does not fit the
// context (agent.ErrContextOverflow) compresses it too, once per turn, and the turn is tried
// again in the continuation. Either way it is exactly /compress: the same summary (the model's,
// or the plain one), the same session transition (session.Boundary.Compress), so work, replies
// and notices pending follow the compression marker to the continuation and are delivered there
// once.

// Texts the chat gets when the host compressed the conversation on its own.
const (
	// AutoCompressed: %d tokens of %d, %d messages, the continuation's session id.
	AutoCompressed = "🗜 This conversation was getting long for the model (about %d of %d tokens), so I compressed %d messages into a summary; it continues in session %s."
	// OverflowCompressed: %d messages, the continuation's session id.
	OverflowCompressed = "🗜 The conversation no longer fit the model's context, so I compressed %d messages into a summary and answered again; it continues in session %s."
)

// crowded reports whether a turn whose reply is rep left the conversation past CompressAt of
// the model's context window, with the tokens it takes and the window.
func (e *Engine) crowded(ctx context.Context, rep *agent.Reply) (bool, int, int) {
	w, ok := e.agent.(agent.Windowed)
	if !ok || rep == nil || rep.Context <= 0 || e.opt.CompressAt <= 0 {
		return false, 0, 0
	}
	window := w.ContextWindow(ctx, rep.Model)
	if window <= 0 {
		return false, 0, 0
	}
	return float64(rep.Context) >= e.opt.CompressAt*float64(window), rep.Context, window
}

// afterTurn compresses key's conversation when the turn it just ended (its reply rep) left it
// crowded. It runs in the chat's runner, so the chat's next item waits for it.
func (e *Engine) afterTurn(ctx context.Context, key string, it *item, rep *agent.Reply) {
	over, tokens, window := e.crowded(ctx, rep)
	if !over {
		return
	}
	e.log.Info("turn: the conversation passed compress_at of the model's context; compressing it",
		"key", key, "tokens", tokens, "window", window, "compress_at", e.opt.CompressAt)
	e.compressNow(ctx, key, it, nil, func(count int, r session.Route) string {
		return fmt.Sprintf(AutoCompressed, tokens, window, count, r.SessionID)
	})
}

// compressNow compresses key's current session as /compress does, from a turn (it) rather than
// the command: the messages of the turns exclude (inbox ids) are left out of the summary and
// appended to the continuation instead, for a turn that goes on there. The chat is told with
// confirm's text. It returns the continuation and whether the session was compressed; a
// session that changed meanwhile (a /new, another compression) is left alone.
func (e *Engine) compressNow(ctx context.Context, key string, it *item, exclude []string, confirm func(count int, r session.Route) string) (session.Route, bool) {
	summary, summarized, count, note, ok := e.compressSummary(ctx, key, exclude)
	if !ok {
		if ctx.Err() == nil {
			e.log.Warn("turn: automatic compression failed", "key", key, "why", note)
		}
		return session.Route{}, false
	}
	var r session.Route
	err := e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		var err error
		if r, err = b.Compress(summarized, summary); err != nil {
			return err
		}
		// The turn's own messages were left out of the summary: they belong to the turn that
		// continues in the new session.
		for i, id := range it.ids {
			if !slices.Contains(exclude, id) || i >= len(it.texts) {
				continue
			}
			m := session.Message{Role: agent.RoleUser, Text: it.texts[i], Turn: id}
			if i < len(it.msgIDs) {
				m.PlatformMessageID = it.msgIDs[i]
			}
			if _, err := b.Append(r.SessionID, m); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case ctx.Err() != nil:
		return session.Route{}, false
	case errors.Is(err, session.ErrConflict):
		e.log.Debug("turn: not compressing: the conversation changed meanwhile", "key", key)
		return session.Route{}, false
	case err != nil:
		e.log.Error("turn: automatic compression failed", "key", key, "error", err)
		return session.Route{}, false
	}
	e.log.Info("turn: conversation compressed", "key", key, "from", summarized, "to", r.SessionID, "messages", count)
	text := confirm(count, r)
	if note != "" {
		text += "\n" + note
	}
	e.notice(ctx, it.plugin, it.profile, key, it.src, text)
	return r, true
}
