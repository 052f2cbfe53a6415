package turn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// history returns the transcript of sessionID as the agent sees it before a turn, oldest first:
// without the turn's own messages (their inbox ids are exclude), slash commands and redacted
// messages; each answer, with its tool calls and results, right after the message it answers
// (an answer is recorded when its turn ends, so messages that arrived during the turn come
// before it in the transcript).
func (e *Engine) history(ctx context.Context, sessionID string, exclude []string) []agent.Message {
	msgs, err := e.k.Transcript(ctx, sessionID, e.opt.HistoryLimit+len(exclude)+16)
	if err != nil {
		e.log.Warn("turn: reading the transcript failed; the turn has no history", "session", sessionID, "error", err)
		return nil
	}
	if len(e.opt.Commands) > 0 { // extension commands (/cron) are not conversation either
		msgs = slices.DeleteFunc(msgs, func(m session.Message) bool {
			cmd, _ := e.parseCommand(m.Text)
			return m.Role == agent.RoleUser && e.opt.Commands[cmd] != nil
		})
	}
	rows := e.turnRows(ctx, sessionID, msgs)
	return assemble(e.answerInterrupted(ctx, sessionID, notYetAsked(msgs, exclude, rows), rows), exclude, e.opt.HistoryLimit)
}

// turnRow is the state and outcome of the inbox row of a message in the transcript.
type turnRow struct{ state, outcome string }

// turnRows reads the inbox rows of the users' messages of msgs (one query), by id. If that fails
// the history is built without what they say (logged).
func (e *Engine) turnRows(ctx context.Context, sessionID string, msgs []session.Message) map[string]turnRow {
	var ids []any
	for _, m := range msgs {
		if m.Role == agent.RoleUser && m.Turn != "" {
			ids = append(ids, m.Turn)
		}
	}
	out := map[string]turnRow{}
	if len(ids) == 0 {
		return out
	}
	rows, err := e.db.QueryContext(ctx, `SELECT id, state, outcome FROM turn_inbox WHERE id IN (`+store.Placeholders(1, len(ids))+`)`, ids...)
	if err != nil {
		e.log.Warn("turn: reading the turns of the history's messages failed", "session", sessionID, "error", err)
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var r turnRow
		if rows.Scan(&id, &r.state, &r.outcome) == nil {
			out[id] = r
		}
	}
	return out
}

// notYetAsked is msgs without the users' messages that another turn is to answer: those that
// came after the first message of this turn (its inbox rows own), applied while it waited or
// started and queued behind it; and those whose turn is still open (received, queued or
// running: with several hosts, a chat's earlier turn may run on another host while this one
// runs here). In the history the model would read them as asked of this turn, answer them
// here and again in theirs, running their commands twice. Messages without a turn (a group's
// observed chatter) and what is not a user's message (a notice delivered meanwhile) stay.
func notYetAsked(msgs []session.Message, own []string, rows map[string]turnRow) []session.Message {
	first := int64(-1)
	for _, m := range msgs {
		if m.Role == agent.RoleUser && slices.Contains(own, m.Turn) && (first < 0 || m.Seq < first) {
			first = m.Seq
		}
	}
	return slices.DeleteFunc(slices.Clone(msgs), func(m session.Message) bool {
		if m.Role != agent.RoleUser || m.Turn == "" || slices.Contains(own, m.Turn) {
			return false
		}
		st := rows[m.Turn].state
		return (first >= 0 && m.Seq > first) || st == stReceived || st == stQueued || st == stRunning
	})
}

// interruptedNote begins what the model reads after a message whose turn a restart or a takeover
// interrupted.
const interruptedNote = "(Not answered: the host restarted while I was answering this, and the user was asked to send it again.)"

// answerInterrupted gives each message of msgs whose turn a restart or a takeover interrupted,
// and that has no answer, one for the model: that it was interrupted, and which background
// processes run in the conversation now (the turn may have started some before it stopped).
// Left unanswered, the message would read as still open, and the model of the next turn would
// answer it again with its own message, running its command a second time (found by the
// promise checker: a watch started twice, each of its matches posted twice).
func (e *Engine) answerInterrupted(ctx context.Context, sessionID string, msgs []session.Message, rows map[string]turnRow) []session.Message {
	answered := map[string]bool{}
	for _, m := range msgs {
		if m.Turn != "" && m.Role == agent.RoleAssistant {
			answered[m.Turn] = true
		}
	}
	interrupted := map[string]bool{}
	for id, r := range rows {
		if r.state == stInterrupted && strings.HasPrefix(r.outcome, "interrupted: the host restarted") && !answered[id] {
			interrupted[id] = true
		}
	}
	if len(interrupted) == 0 {
		return msgs
	}
	note := interruptedNote
	if e.procs != nil {
		if infos, err := e.procs.List(ctx); err == nil {
			var running []string
			for _, p := range infos {
				if p.Stamp.SessionID == sessionID && !p.State.Final() {
					running = append(running, p.ID+": "+p.Command)
				}
			}
			if len(running) > 0 {
				note += "\nBackground processes running in this conversation now (do not start them again unless asked):\n" + strings.Join(running, "\n")
			}
		}
	}
	out := make([]session.Message, 0, len(msgs)+len(interrupted))
	for _, m := range msgs {
		out = append(out, m)
		if m.Role == agent.RoleUser && interrupted[m.Turn] {
			out = append(out, session.Message{Seq: m.Seq, SessionID: sessionID, Role: agent.RoleAssistant, Text: note, Turn: m.Turn})
			delete(interrupted, m.Turn) // once per turn
		}
	}
	return out
}

// assemble orders and converts a transcript; see history.
func assemble(msgs []session.Message, exclude []string, limit int) []agent.Message {
	out, _ := assembleUndo(msgs, exclude, limit)
	return out
}

// assembleUndo is assemble that also returns what each /undo or /retry of the transcript took
// out of the history, by the command's turn (its inbox id). Each such command is the record of
// its own effect: it takes the last exchange before it (the last user message and everything
// that answers it) out of what the model sees; the transcript keeps all of it.
func assembleUndo(msgs []session.Message, exclude []string, limit int) ([]agent.Message, map[string][]session.Message) {
	skip := map[string]bool{}
	for _, id := range exclude {
		skip[id] = true
	}
	// A turn's anchor is its last question (a user message or the notification it answers).
	anchor := map[string]int64{}
	for _, m := range msgs {
		if m.Turn != "" && (m.Role == agent.RoleUser || m.Role == agent.RoleNotification) && m.Seq > anchor[m.Turn] {
			anchor[m.Turn] = m.Seq
		}
	}
	type keyed struct {
		k    int64
		m    session.Message
		undo bool // an /undo or /retry: takes the exchange before it out
	}
	var kept []keyed
	for _, m := range msgs {
		if m.Redacted {
			continue
		}
		if m.Role == agent.RoleUser {
			if cmd, _ := parseCommand(m.Text); cmd == "undo" || cmd == "retry" {
				// Applied even when its turn is excluded (the retried turn itself): what it
				// took out stays out.
				kept = append(kept, keyed{k: m.Seq, m: m, undo: true})
				continue
			}
		}
		if m.Turn != "" && skip[m.Turn] {
			continue
		}
		if m.Role == agent.RoleUser {
			if cmd, _ := parseCommand(m.Text); cmd != "" {
				continue
			}
		}
		k := m.Seq
		if a, ok := anchor[m.Turn]; ok && m.Turn != "" && (m.Role == agent.RoleAssistant || m.Role == agent.RoleTool) {
			k = a
		}
		kept = append(kept, keyed{k: k, m: m})
	}
	sort.SliceStable(kept, func(i, j int) bool {
		if kept[i].k != kept[j].k {
			return kept[i].k < kept[j].k
		}
		return kept[i].m.Seq < kept[j].m.Seq
	})
	undone := map[string][]session.Message{}
	var hist []keyed
	for _, k := range kept {
		if !k.undo {
			hist = append(hist, k)
			continue
		}
		last := -1
		for i := len(hist) - 1; i >= 0; i-- {
			if hist[i].m.Role == agent.RoleUser {
				last = i
				break
			}
		}
		if last < 0 {
			continue // nothing to take out
		}
		// User messages in a row (merged into one turn while the chat was busy) are one
		// exchange with what answers them.
		for last > 0 && hist[last-1].m.Role == agent.RoleUser {
			last--
		}
		for _, d := range hist[last:] {
			undone[k.m.Turn] = append(undone[k.m.Turn], d.m)
		}
		hist = hist[:last]
	}
	if limit > 0 && len(hist) > limit {
		hist = hist[len(hist)-limit:]
	}
	out := make([]agent.Message, 0, len(hist))
	for _, k := range hist {
		out = append(out, fromSession(k.m))
	}
	return out, undone
}

// meta is the agent's structured part of a transcript message.
type meta struct {
	ToolCalls  []agent.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
	Name       string           `json:"name,omitempty"`
	Notices    []agent.Notice   `json:"notices,omitempty"`
}

func fromSession(m session.Message) agent.Message {
	out := agent.Message{Role: m.Role, Text: m.Text}
	switch m.Role {
	case agent.RoleUser, agent.RoleAssistant, agent.RoleTool, agent.RoleNotification, agent.RoleSystem:
	default:
		out.Role = agent.RoleSystem
	}
	if m.Meta != "" {
		var md meta
		if json.Unmarshal([]byte(m.Meta), &md) == nil {
			out.ToolCalls, out.ToolCallID, out.Name, out.Notices = md.ToolCalls, md.ToolCallID, md.Name, md.Notices
		}
	}
	return out
}

func toSession(m agent.Message, turn string) session.Message {
	out := session.Message{Role: m.Role, Text: m.Text, Turn: turn}
	if len(m.ToolCalls) > 0 || m.ToolCallID != "" || m.Name != "" || len(m.Notices) > 0 {
		b, _ := json.Marshal(meta{ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name, Notices: m.Notices})
		out.Meta = string(b)
	}
	return out
}

// record appends what a turn produced (its tool calls and results, its answer) to the
// transcript of sessionID, as part of turn. It runs when the turn ends, before its answer is
// sent: the transcript is what the agent said, whether or not the chat got it (unless the turn
// was interrupted meanwhile).
// The turn's usage (the server's counts of its model calls) is added to the session's (/usage).
func (e *Engine) record(ctx context.Context, key, sessionID, turn string, msgs []agent.Message, u agent.Usage) {
	if len(msgs) == 0 && u.Calls == 0 {
		return
	}
	err := e.k.WithBoundary(context.WithoutCancel(ctx), key, func(b *session.Boundary) error {
		// A turn interrupted since its answer came (a recall, /stop: both cancel it inside this
		// boundary) records nothing, as one interrupted before does: a recall has redacted the
		// transcript already, and this answer may quote what the sender took back.
		var by *interrupted
		if errors.As(context.Cause(ctx), &by) {
			return nil
		}
		// Each statement is retried on its own while the store refuses writes (an append that
		// was refused added nothing): a transcript without the answer shows the model the user's
		// request again, unanswered, in the next turn, and it may run its command a second time.
		for _, m := range msgs {
			if err := e.whileRefused(func() error { _, err := b.Append(sessionID, toSession(m, turn)); return err }); err != nil {
				return err
			}
		}
		if u.Calls > 0 {
			return e.whileRefused(func() error { return b.AddUsage(sessionID, u.PromptTokens, u.CompletionTokens, u.Calls) })
		}
		return nil
	})
	if err != nil {
		e.log.Error("turn: recording the answer in the transcript failed", "key", key, "session", sessionID, "error", err)
	}
}

// turnMessages is what a turn adds to the transcript: its trail and its answer.
func turnMessages(rep *agent.Reply) []agent.Message {
	if rep == nil {
		return nil
	}
	msgs := append([]agent.Message(nil), rep.Trail...)
	if strings.TrimSpace(rep.Text) != "" {
		msgs = append(msgs, agent.Message{Role: agent.RoleAssistant, Text: rep.Text})
	}
	return msgs
}

// MoreNote ends an answer cut at Options.MaxAnswerMessages; %d is how many messages remain.
const MoreNote = "(The answer goes on for about %d more messages. Send /more to see the next part.)"

// NothingMore answers /more when no cut answer is waiting.
const NothingMore = "There is nothing more to send."

// pending is the rest of a cut answer, sent on /more.
type pending struct {
	text            string
	plugin, profile string
	target          abi.OutboundMessage
	stamp           session.Stamp
}

// capParts splits text for plugin and cuts it to at most Options.MaxAnswerMessages messages: the
// last one says how to get the rest, which is returned.
func (e *Engine) capParts(plugin, text string) (parts []string, rest string) {
	parts = e.ledger.Split(plugin, text)
	limit := e.opt.MaxAnswerMessages
	if len(parts) <= limit {
		return parts, ""
	}
	// The longest prefix that fits limit-1 messages, cut at a line or word boundary.
	lo, hi := 0, len(text)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		for mid > 0 && !utf8.RuneStart(text[mid]) {
			mid--
		}
		if mid <= lo {
			break
		}
		if len(e.ledger.Split(plugin, text[:mid])) <= limit-1 {
			lo = mid
		} else {
			hi = mid - 1
			for hi > 0 && hi < len(text) && !utf8.RuneStart(text[hi]) {
				hi--
			}
		}
	}
	cut := lo
	if i := strings.LastIndexAny(text[:cut], "\n"); i > cut*4/5 {
		cut = i + 1
	} else if i := strings.LastIndexAny(text[:cut], " \t"); i > cut*4/5 {
		cut = i + 1
	}
	if cut == 0 {
		cut = lo
	}
	head, rest := text[:cut], text[cut:]
	remaining := len(e.ledger.Split(plugin, rest))
	parts = append(e.ledger.Split(plugin, strings.TrimRight(head, " \t\n")), fmt.Sprintf(MoreNote, remaining))
	return parts, rest
}

// leftovers is the rest of each key's last cut answer, for /more. Its mutex is a leaf (see
// Engine).
type leftovers struct {
	mu sync.Mutex // guards m
	m  map[string]*pending
}

// setMore keeps (or, with rest "", forgets) the rest of key's last answer.
func (e *Engine) setMore(key string, p *pending) {
	e.more.mu.Lock()
	defer e.more.mu.Unlock()
	if p == nil || p.text == "" {
		delete(e.more.m, key)
		return
	}
	e.more.m[key] = p
}

// sendMore answers /more with the next part of the last cut answer.
func (e *Engine) sendMore(ctx context.Context, key string, it *item) (string, string) {
	e.more.mu.Lock()
	p := e.more.m[key]
	delete(e.more.m, key)
	e.more.mu.Unlock()
	if p == nil {
		e.notice(ctx, it.plugin, it.profile, key, it.src, NothingMore)
		return stDone, "command /more: nothing pending"
	}
	parts, rest := e.capParts(p.plugin, p.text)
	if rest != "" {
		e.setMore(key, &pending{text: rest, plugin: p.plugin, profile: p.profile, target: p.target, stamp: p.stamp})
	}
	id, err := e.ledger.Enqueue(context.WithoutCancel(ctx), delivery.Message{
		Plugin: p.plugin, Profile: p.profile, Key: key, Target: p.target, Text: p.text, Parts: parts, Kind: delivery.KindReply,
		Guard: delivery.GuardLineage, Stamp: p.stamp, Origin: "more:" + it.first(),
	})
	if err != nil {
		return stDone, "command /more: not recorded: " + err.Error()
	}
	return stDone, "command /more: sent " + id
}
