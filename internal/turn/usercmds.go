package turn

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/session"
)

// The commands users of chat assistants expect: /help, /model, /usage, /undo and /retry.

// commandHelp is /help's line for each of the engine's own commands, in the order shown.
var commandHelp = []struct{ name, help string }{
	{"new", "start a new conversation (background jobs of this one will not report into it)"},
	{"stop", "stop the answer being written"},
	{"retry", "ask the model again for your last message (the old answer leaves what it sees)"},
	{"undo", "take your last message and its answer out of what the model sees"},
	{"compress", "shorten the conversation into a summary; it goes on from there"},
	{"model", "show or choose this conversation's model"},
	{"usage", "the tokens the model server counted for this conversation"},
	{"more", "the rest of an answer that was cut"},
	{"last", "send the last message again (when one may not have arrived)"},
	{"sessions", "this chat's conversations"},
	{"resume", "go back to an earlier conversation: /resume <id or title>"},
	{"branch", "copy this conversation and go on in the copy: /branch [title]"},
	{"status", "the chat's session, turn and background jobs"},
	{"approve", "let a command that waits for your approval run: /approve [id]"},
	{"deny", "refuse a command that waits for your approval: /deny [id]"},
	{"reset", "like /new"},
	{"help", "this list"},
}

// extensionHelp is /help's line for the extension commands the engine knows of.
var extensionHelp = map[string]string{
	"cron": "your scheduled jobs in this chat: /cron list, /cron add <schedule> <prompt>…",
}

// Texts of the commands.
const (
	NothingUndo   = "There is nothing to undo."
	NothingRetry  = "There is no earlier message to ask again."
	ModelsOff     = "Choosing the model is not enabled here: the operator lists the models a chat may use in agent.models."
	NoUsage       = "The model server has reported no usage for this conversation yet."
	HelpTitle     = "Commands:"
	HelpAgentNote = "Anything else you send goes to the agent."
)

// helpText answers /help: the commands src's sender may use here.
func (e *Engine) helpText(ctx context.Context, plugin, profile string, src abi.Source) string {
	var b strings.Builder
	b.WriteString(HelpTitle)
	for _, c := range commandHelp {
		if c.name == "model" && len(e.opt.Models) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n/%s — %s", c.name, c.help)
	}
	var ext []string
	for name := range e.opt.Commands {
		ext = append(ext, name)
	}
	slices.Sort(ext)
	for _, name := range ext {
		if e.opt.CommandAllowed != nil && !e.opt.CommandAllowed(ctx, name, plugin, profile, src) {
			continue
		}
		help := extensionHelp[name]
		if help == "" {
			help = "a command of this host"
		}
		fmt.Fprintf(&b, "\n/%s — %s", name, help)
	}
	b.WriteString("\n" + HelpAgentNote)
	if h, ok := e.agent.(interface{ Help() string }); ok {
		b.WriteString("\n\n" + h.Help())
	}
	return b.String()
}

// modelCommand answers /model inside the boundary of the chat whose current session is id:
// without arg it names the conversation's model and the choices; with one it switches the
// conversation to a model of the operator's list (Options.Models), or back to the configured
// one with "default".
func (e *Engine) modelCommand(b *session.Boundary, id, arg string) string {
	if len(e.opt.Models) == 0 {
		return ModelsOff
	}
	info, err := e.k.Session(b.Context(), id)
	if err != nil {
		return "⚠️ /model failed: " + err.Error()
	}
	current := info.Model
	if current == "" {
		current = e.opt.Model
	}
	choices := "Models you can choose: " + strings.Join(e.opt.Models, ", ") + ". Send /model <name> to switch, /model default to go back."
	arg = strings.TrimSpace(arg)
	switch {
	case arg == "":
		which := "the default"
		if info.Model != "" {
			which = "chosen for this conversation"
		}
		return fmt.Sprintf("Model: %s (%s).\n%s", current, which, choices)
	case strings.EqualFold(arg, "default"):
		if err := b.SetModel(id, ""); err != nil {
			return "⚠️ /model failed: " + err.Error()
		}
		return fmt.Sprintf("🔁 This conversation uses the default model again: %s.", e.opt.Model)
	case !slices.Contains(e.opt.Models, arg):
		return fmt.Sprintf("“%s” is not a model you can choose here.\n%s", arg, choices)
	}
	if err := b.SetModel(id, arg); err != nil {
		return "⚠️ /model failed: " + err.Error()
	}
	return fmt.Sprintf("🔁 This conversation now uses the model %s.", arg)
}

// usageCommand answers /usage for session id: what the model server counted for it.
func (e *Engine) usageCommand(ctx context.Context, id string) string {
	info, err := e.k.Session(ctx, id)
	if err != nil {
		return "⚠️ /usage failed: " + err.Error()
	}
	if info.ModelCalls == 0 {
		return NoUsage
	}
	return fmt.Sprintf("Usage of this conversation, as the model server counted it: %d prompt tokens and %d completion tokens (%d in all) in %d model calls.",
		info.PromptTokens, info.CompletionTokens, info.PromptTokens+info.CompletionTokens, info.ModelCalls)
}

// sessionModel is the model session id chose (/model), "" for the configured one.
func (e *Engine) sessionModel(ctx context.Context, id string) string {
	info, err := e.k.Session(ctx, id)
	if err != nil {
		e.log.Warn("turn: reading the session's model failed; using the configured one", "session", id, "error", err)
		return ""
	}
	return info.Model
}

// undone returns what the /undo or /retry of turn took out of the history of key's current
// session, with that session's id.
func (e *Engine) undone(ctx context.Context, key, turn string) ([]session.Message, string, error) {
	route, ok, err := e.k.Current(ctx, key)
	if err != nil || !ok {
		return nil, "", err
	}
	msgs, err := e.k.Transcript(ctx, route.SessionID, 0)
	if err != nil {
		return nil, "", err
	}
	_, undone := assembleUndo(msgs, nil, 0)
	return undone[turn], route.SessionID, nil
}

// undo answers /undo: its transcript entry already takes the last exchange out of the history
// (assembleUndo); the answer says what it took.
func (e *Engine) undo(ctx context.Context, key string, it *item) (string, string) {
	dropped, _, err := e.undone(ctx, key, it.first())
	switch {
	case err != nil:
		return "⚠️ /undo failed: " + err.Error(), "command /undo: " + err.Error()
	case len(dropped) == 0:
		return NothingUndo, "command /undo: nothing to undo"
	}
	return fmt.Sprintf("↩️ Your message “%s” and its answer no longer reach the model (the transcript keeps them).",
		clipText(firstUser(dropped), 80)), fmt.Sprintf("command /undo: %d messages out of the history", len(dropped))
}

// retryCommand answers /retry: the last exchange is out of the history (its transcript entry, as for
// /undo) and the user's message of it runs again as a turn of its own, recorded under the
// command's inbox row.
func (e *Engine) retryCommand(ctx context.Context, key string, it *item) {
	dropped, sessionID, err := e.undone(ctx, key, it.first())
	var texts []string
	for _, m := range dropped {
		if m.Role == agent.RoleUser {
			texts = append(texts, m.Text)
		}
	}
	if err != nil || len(texts) == 0 {
		text, outcome := NothingRetry, "command /retry: nothing to retry"
		if err != nil {
			text, outcome = "⚠️ /retry failed: "+err.Error(), "command /retry: "+err.Error()
		}
		n := e.noticeMsg(it.plugin, it.profile, key, it.src, text)
		e.end(key, it, stDone, outcome, &n, stRunning)
		return
	}
	// The question goes back into the transcript after the /retry, so that the new answer
	// follows it there.
	err = e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		for _, t := range texts {
			if _, err := b.Append(sessionID, session.Message{Role: agent.RoleUser, Text: t, Turn: it.first()}); err != nil {
				return err
			}
		}
		return nil
	})
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		n := e.noticeMsg(it.plugin, it.profile, key, it.src, "⚠️ /retry failed: "+err.Error())
		e.end(key, it, stFailed, "command /retry: "+err.Error(), &n, stRunning)
		return
	}
	// The command's inbox row runs the retried message(s) as its turn.
	again := &item{kind: it.kind, plugin: it.plugin, profile: it.profile, src: it.src, attempts: it.attempts,
		entries: []entry{{id: it.first(), text: strings.Join(texts, "\n"), msgID: it.entries[0].msgID}}}
	e.foreground(ctx, key, again)
}

// firstUser is the text of the first user message of msgs.
func firstUser(msgs []session.Message) string {
	for _, m := range msgs {
		if m.Role == agent.RoleUser {
			return strings.Join(strings.Fields(m.Text), " ")
		}
	}
	return ""
}

// clipText cuts s to at most n runes, marking the cut.
func clipText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
