package turn

import (
	"context"
	"fmt"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/session"
)

// command runs a queued slash command (/resume, /branch, /compress, /sessions) in its turn, so it
// never overtakes the turn before it.
func (e *Engine) command(ctx context.Context, key string, it *item) {
	switch it.cmd {
	case "more":
		state, outcome := e.sendMore(ctx, key, it)
		e.end(key, it, state, outcome, nil, stRunning)
		return
	case "last":
		e.sendLast(ctx, key, it)
		return
	case "undo":
		text, outcome := e.undo(ctx, key, it)
		n := e.noticeMsg(it.plugin, it.profile, key, it.src, text)
		e.end(key, it, stDone, outcome, &n, stRunning)
		return
	case "retry":
		e.retryCommand(ctx, key, it)
		return
	}
	var (
		text, summary, note, summarized string
		count                           int
	)
	if it.cmd == "compress" {
		// The summary is written outside the boundary (a model call may take a while and must
		// not hold up /new); Compress then checks the session is still the one summarized.
		var ok bool
		if summary, summarized, count, note, ok = e.compressSummary(ctx, key, nil); !ok {
			if ctx.Err() != nil {
				return
			}
			n := e.noticeMsg(it.plugin, it.profile, key, it.src, "⚠️ /compress failed: "+note)
			e.end(key, it, stFailed, "command /compress: "+note, &n, stRunning)
			return
		}
	}
	err := e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		var err error
		switch it.cmd {
		case "resume":
			if it.arg == "" {
				text, err = e.sessionList(ctx, key, "Sessions of this chat (resume one with /resume <id or title>):")
				return err
			}
			var r session.Route
			if r, err = b.Resume(it.arg); err == nil {
				text = fmt.Sprintf("↩️ Resumed session %s.", r.SessionID)
			}
		case "branch":
			var r session.Route
			if r, err = b.Branch(it.arg); err == nil {
				text = fmt.Sprintf("🌿 Branched into session %s; the previous one is kept.", r.SessionID)
			}
		case "compress":
			var r session.Route
			if r, err = b.Compress(summarized, summary); err == nil {
				text = fmt.Sprintf("🗜 Compressed %d messages; the conversation continues in session %s.", count, r.SessionID)
				if note != "" {
					text += "\n" + note
				}
			}
		case "sessions":
			text, err = e.sessionList(ctx, key, "Sessions of this chat:")
		}
		return err
	})
	if ctx.Err() != nil {
		return // interrupted (the command recorded it) or the host is stopping
	}
	state, outcome := stDone, "command /"+it.cmd
	if err != nil {
		state, outcome = stFailed, outcome+": "+err.Error()
		text = fmt.Sprintf("⚠️ /%s failed: %v", it.cmd, err)
	}
	var answer *delivery.Message
	if text != "" {
		n := e.noticeMsg(it.plugin, it.profile, key, it.src, text)
		answer = &n
	}
	e.end(key, it, state, outcome, answer, stRunning)
}

// NothingLast answers /last when the chat has been sent nothing to send again.
const NothingLast = "There is no earlier message to send again."

// sendLast answers /last: the chat's last message (see delivery.Ledger.Last) is sent again as a
// new message, with the command's outcome. It is how a user gets an answer whose outcome was
// unknown (delivery.UncertainNotice): the host never resends one unasked.
func (e *Engine) sendLast(ctx context.Context, key string, it *item) {
	m, ok, err := e.ledger.Last(ctx, key)
	switch {
	case err != nil:
		n := e.noticeMsg(it.plugin, it.profile, key, it.src, "⚠️ /last failed: "+err.Error())
		e.end(key, it, stFailed, "command /last: "+err.Error(), &n, stRunning)
	case !ok:
		n := e.noticeMsg(it.plugin, it.profile, key, it.src, NothingLast)
		e.end(key, it, stDone, "command /last: nothing to send", &n, stRunning)
	default:
		m.Origin = "last:" + it.ids[0]
		e.end(key, it, stDone, "command /last", &m, stRunning)
	}
}

// compressSummary writes the summary /compress continues from: by the agent when it can
// (agent.Compressor; the model for the OpenAI agent), else, or when that fails, the
// deterministic agent.Summary. The history is the current session's, without slash commands
// (so not the /compress itself), without the messages of the turns exclude (inbox ids). It
// returns the summary, the session it summarizes, how many messages it covers, a note for the
// user, and false when there is nothing to compress (the note says why: no session, or the
// transcript could not be read; never an empty summary).
func (e *Engine) compressSummary(ctx context.Context, key string, exclude []string) (string, string, int, string, bool) {
	route, ok, err := e.k.Current(ctx, key)
	switch {
	case err != nil:
		return "", "", 0, "no session: " + err.Error(), false
	case !ok:
		return "", "", 0, "no session", false
	}
	msgs, err := e.k.Transcript(ctx, route.SessionID, 0)
	if err != nil {
		return "", "", 0, "reading the transcript failed: " + err.Error(), false
	}
	history := assemble(msgs, exclude, 0)
	c, ok := e.agent.(agent.Compressor)
	if !ok {
		return agent.Summary(history), route.SessionID, len(history), "", true
	}
	summary, err := c.Compress(ctx, history)
	switch {
	case err == nil:
		return summary, route.SessionID, len(history), "", true
	case ctx.Err() != nil:
		return "", "", 0, "cancelled", false
	}
	e.log.Warn("turn: the agent could not summarize; using the plain summary", "key", key, "error", err)
	return agent.Summary(history), route.SessionID, len(history),
		"(The model could not write the summary: " + agent.UserMessage(err) + " A plain summary was kept instead.)", true
}

func (e *Engine) sessionList(ctx context.Context, key, title string) (string, error) {
	v, err := e.k.Show(ctx, key, 0)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(title)
	for _, s := range append([]session.SessionInfo{v.Focus}, v.Ancestors...) {
		fmt.Fprintf(&b, "\n• %s", s.ID)
		if s.Title != "" {
			fmt.Fprintf(&b, " “%s”", s.Title)
		}
		if s.EndedAt == nil {
			b.WriteString(" (current)")
		} else {
			fmt.Fprintf(&b, " (ended: %s)", s.EndReason)
		}
	}
	return b.String(), nil
}

// status describes the chat's state; it runs at once, inside the Dispatch boundary.
func (e *Engine) status(b *session.Boundary, key string) string {
	route, ok, err := b.Current()
	if err != nil {
		return "⚠️ status unavailable: " + err.Error()
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Session key: %s", key)
	if ok {
		fmt.Fprintf(&s, "\nSession: %s (generation %d)", route.SessionID, route.Generation)
	}
	e.mu.Lock()
	if kq := e.keys[key]; kq != nil {
		busy := "idle"
		if kq.running != nil {
			busy = "answering"
			if kq.running.kind == kindNotification {
				busy = "answering a background-job notification"
			}
		}
		fmt.Fprintf(&s, "\nTurn: %s, %d queued", busy, len(kq.items))
	}
	e.mu.Unlock()
	if e.procs != nil {
		if list, err := e.procs.List(b.Context()); err == nil {
			running := 0
			for _, p := range list {
				if p.Stamp.Key == key && !p.State.Final() {
					running++
				}
			}
			fmt.Fprintf(&s, "\nBackground jobs running: %d", running)
		}
	}
	return s.String()
}

// Command is a slash command implemented outside the engine (such as /cron). It runs as a
// queued item of its chat, after the turns before it and outside the boundary lock; its answer
// is sent to the chat as a notice. Authorization beyond the engine's is the command's own.
type Command interface {
	Run(ctx context.Context, call CommandCall) string
}

// CommandCall is one invocation of a Command.
type CommandCall struct {
	Plugin, Profile string
	Key             string     // the chat's session key
	Source          abi.Source // who sent it, and where
	SessionID       string     // the chat's current session when the command ran
	Arg             string     // the text after the command word
}

// CommandFunc adapts a function to Command.
type CommandFunc func(ctx context.Context, call CommandCall) string

// Run calls f.
func (f CommandFunc) Run(ctx context.Context, call CommandCall) string { return f(ctx, call) }

// extension runs an extension command: the chat's current session is read inside the
// boundary, the command runs outside it. Its answer is queued with the row's outcome, in one
// transaction (see end).
func (e *Engine) extension(ctx context.Context, key string, it *item, c Command) {
	call := CommandCall{Plugin: it.plugin, Profile: it.profile, Key: key, Source: it.src, Arg: it.arg}
	err := e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		route, ok, err := b.Current()
		if ok {
			call.SessionID = route.SessionID
		}
		return err
	})
	state, outcome, text := stDone, "command /"+it.cmd, ""
	if err == nil {
		text = c.Run(ctx, call)
	}
	if ctx.Err() != nil {
		return // interrupted (the command recorded it) or the host is stopping
	}
	if err != nil {
		state, outcome, text = stFailed, outcome+": "+err.Error(), fmt.Sprintf("⚠️ /%s failed: %v", it.cmd, err)
	}
	var answer *delivery.Message
	if text != "" {
		n := e.noticeMsg(it.plugin, it.profile, key, it.src, text)
		answer = &n
	}
	e.end(key, it, state, outcome, answer, stRunning)
}
