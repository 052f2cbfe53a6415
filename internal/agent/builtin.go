package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// Builtin is the deterministic agent that needs no model: the embedded default. It answers
// plainly and understands a few commands that drive background processes through Turn.Tools, so
// a user can see the whole notification flow from a chat. On a synthetic turn it only summarizes
// the notices (Summarize) and calls no tool at all.
type Builtin struct {
	shTimeout time.Duration
	tr        *Transcriber // nil: voice messages get VoiceNotSetUp
	log       *slog.Logger
	metrics   *Metrics
}

// Builtin's limits.
const (
	DefaultShTimeout   = 10 * time.Second  // "sh" without Config.CommandTimeout
	DefaultWaitTimeout = 30 * time.Second  // "wait <id>" without seconds
	MaxWaitTimeout     = 300 * time.Second // the longest "wait <id> <seconds>"
	builtinLogBytes    = 3000
	builtinOutputChars = 3000
	builtinMaxCommands = 10
	builtinEchoChars   = 200
)

// BuiltinHelp is Builtin's answer to "help".
const BuiltinHelp = `I'm the built-in agent: no model, just a few commands to try background processes from this chat.
run <command> - start it in the background; I'll tell you when it finishes
watch <pattern> -- <command> - start it in the background; I'll tell you when an output line matches <pattern>
sh <command> - run it now and show its output
ps - list this chat's processes
poll <id> - show a process's state and recent output
log <id> - show the end of a process's output
wait <id> [seconds] - wait for a process to finish (default 30s)
kill <id> - stop a process
sendfile <name> - send me the file <name> from this chat's working directory
help - this text
<id> is a process id (proc_…), or "last" for the newest process. Try: run sleep 3; echo done`

// Help returns the commands the builtin agent understands (the host's /help lists them after
// its own).
func (b *Builtin) Help() string { return BuiltinHelp }

// Builtin's fixed answers.
const (
	BuiltinNoTools = "Background processes are not available in this chat."
	BuiltinEmpty   = "I got an empty message. Send help to see what I can do."
	builtinPlain   = "I'm the built-in agent, so I can't chat like a model would. I understood: “%s”. Send help to see the commands I know."
	// BuiltinNoFiles notes the attachments the builtin agent does not open (all but voice).
	BuiltinNoFiles = "(I'm the built-in agent: I cannot look at attached files. A model agent (agent.kind: openai) can.)"
)

// NewBuiltin returns the builtin agent. Only cfg.CommandTimeout (the "sh" timeout),
// cfg.Transcribe (voice messages; a bad one is ignored here: New refuses it), cfg.Logger and
// cfg.Metrics are used.
func NewBuiltin(cfg Config) *Builtin {
	b := &Builtin{shTimeout: cfg.CommandTimeout, log: cfg.Logger, metrics: cfg.Metrics}
	if b.shTimeout <= 0 {
		b.shTimeout = DefaultShTimeout
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	if cfg.Transcribe != nil {
		b.tr, _ = NewTranscriber(*cfg.Transcribe, cfg.Transport, cfg.Secrets)
	}
	return b
}

// attachments reads what the builtin agent can of a message's attachments: the transcripts of
// voice messages (with a transcription server), and one-line notes for the rest.
func (b *Builtin) attachments(ctx context.Context, atts []Attachment) (heard []string, notes []string, err error) {
	in := userInput{}
	for _, a := range atts {
		if a.Kind != abi.AttachVoice && a.Kind != abi.AttachAudio {
			in.note(BuiltinNoFiles)
			continue
		}
		if b.tr == nil {
			in.note(VoiceNotSetUp)
			continue
		}
		text, err := b.tr.Transcribe(ctx, a)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			in.note(transcribeFailed(mediaOptions{log: b.log, metrics: b.metrics}, a, err))
			continue
		}
		b.metrics.transcribed("ok")
		if text != "" {
			heard = append(heard, text)
		}
	}
	return heard, in.notes, nil
}

// Turn answers t. A synthetic turn gets a summary of its notices (no tool is called).
// Otherwise each line that starts with a command word runs that command, in order (a line
// ending in a backslash continues on the next), and other text gets a plain answer that points
// to help.
func (b *Builtin) Turn(ctx context.Context, t *Turn) (*Reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t.Synthetic {
		if len(t.Notices) == 0 {
			return &Reply{Text: summarizeText(t.Text)}, nil
		}
		return &Reply{Text: Summarize(t.Notices)}, nil
	}
	text := strings.TrimSpace(strings.ReplaceAll(t.Text, "\r\n", "\n"))
	var notes []string
	if len(t.Attachments) > 0 {
		heard, n, err := b.attachments(ctx, t.Attachments)
		if err != nil {
			return nil, err
		}
		notes = n
		if text == "" {
			// A transcript is chat, never a command: what was heard is echoed, not run.
			if len(heard) > 0 {
				return &Reply{Text: withNotes(plainAnswer(strings.Join(heard, " ")), notes)}, nil
			}
			if onlySound(t.Attachments) {
				// Voice the host cannot hear: the note says why and how to set it up.
				return &Reply{Text: withNotes("", notes)}, nil
			}
			return &Reply{Text: withNotes(describeAttachments(t.Attachments), notes)}, nil
		}
	}
	if text == "" {
		return &Reply{Text: BuiltinEmpty}, nil
	}
	rep := &Reply{}
	var parts []string
	if len(t.Attachments) > 0 {
		parts = append(parts, describeAttachments(t.Attachments))
	}
	for i, seg := range segments(text) {
		if commandWord(seg) == "sendfile" {
			name := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(seg), strings.Fields(seg)[0]))
			if name == "" {
				parts = append(parts, "sendfile needs a file name.")
				continue
			}
			rep.Media = append(rep.Media, name) // the host sends it if it is in the working directory
			parts = append(parts, "Sending "+name+".")
			continue
		}
		if i == builtinMaxCommands {
			parts = append(parts, fmt.Sprintf("(I skipped the rest: at most %d commands per message.)", builtinMaxCommands))
			break
		}
		out, calls, err := b.command(ctx, t.Tools, seg)
		rep.ToolCalls += calls
		if err != nil {
			return nil, err
		}
		parts = append(parts, out)
	}
	rep.Text = strings.Join(parts, "\n\n")
	if len(notes) > 0 {
		rep.Text = withNotes(rep.Text, notes)
	}
	return rep, nil
}

// onlySound reports whether every attachment is voice or audio.
func onlySound(atts []Attachment) bool {
	for _, a := range atts {
		if a.Kind != abi.AttachVoice && a.Kind != abi.AttachAudio {
			return false
		}
	}
	return true
}

// describeAttachments lists the files of a message as the host stored them.
func describeAttachments(atts []Attachment) string {
	lines := []string{fmt.Sprintf("I received %d file(s):", len(atts))}
	for _, a := range atts {
		name := a.Name
		if name == "" {
			name = "(no name)"
		}
		lines = append(lines, fmt.Sprintf("- %s %s: %s, %d bytes", a.Kind, name, a.MIMEType, a.Size))
	}
	return strings.Join(lines, "\n")
}

// segments splits a (possibly merged) message into commands and chat: each line that starts
// with a command word is one command (a line ending in a backslash continues on the next, as in
// sh), and consecutive other lines are one piece of chat. Chat text is never run.
func segments(text string) []string {
	var (
		out  []string
		chat []string
	)
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		if _, ok := builtinCommands[commandWord(l)]; !ok {
			chat = append(chat, l)
			continue
		}
		if len(chat) > 0 {
			out, chat = append(out, strings.Join(chat, "\n")), nil
		}
		cmd := strings.TrimRight(lines[i], " \t")
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			cmd += "\n" + strings.TrimRight(lines[i], " \t")
		}
		out = append(out, strings.TrimSpace(cmd))
	}
	if len(chat) > 0 {
		out = append(out, strings.Join(chat, "\n"))
	}
	return out
}

// commandWord is the lower-cased first word of s, without a leading slash.
func commandWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(f[0], "/"))
}

// builtinCommands maps a command word to whether it needs Tools.
var builtinCommands = map[string]bool{
	"help": false, "?": false, "sendfile": false,
	"run": true, "watch": true, "sh": true, "ps": true, "poll": true, "log": true, "wait": true, "kill": true,
}

// command runs one command line and returns its answer and the number of tool calls made. The
// only error returned is ctx's: a tool's error is part of the answer.
func (b *Builtin) command(ctx context.Context, tools Tools, line string) (string, int, error) {
	word := commandWord(line)
	needsTools, known := builtinCommands[word]
	if !known {
		return plainAnswer(line), 0, nil
	}
	if needsTools && tools == nil {
		return BuiltinNoTools, 0, nil
	}
	arg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), strings.Fields(line)[0]))
	var (
		out   string
		calls int
		err   error
	)
	switch word {
	case "help", "?":
		return BuiltinHelp, 0, nil
	case "run":
		out, calls, err = b.run(ctx, tools, arg)
	case "watch":
		out, calls, err = b.watch(ctx, tools, arg)
	case "sh":
		out, calls, err = b.sh(ctx, tools, arg)
	case "ps":
		out, calls, err = b.ps(ctx, tools)
	default:
		out, calls, err = b.onProcess(ctx, tools, word, arg)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return "", calls, ctxErr
	}
	if err != nil {
		return "Sorry, that did not work: " + err.Error(), calls, nil
	}
	return out, calls, nil
}

func plainAnswer(text string) string {
	greet := ""
	switch strings.ToLower(strings.Trim(text, " !.?")) {
	case "hi", "hello", "hey", "hallo", "good morning", "good evening":
		greet = "Hello! "
	}
	return greet + fmt.Sprintf(builtinPlain, clip(strings.Join(strings.Fields(text), " "), builtinEchoChars))
}

func (b *Builtin) run(ctx context.Context, tools Tools, cmd string) (string, int, error) {
	if cmd == "" {
		return "Usage: run <command>", 0, nil
	}
	res, err := tools.Spawn(ctx, SpawnRequest{Command: cmd, Background: true, NotifyOnComplete: true})
	if err != nil {
		return "", 1, err
	}
	out := fmt.Sprintf("Started %s in the background: %s\nI'll tell you when it finishes.", res.ID, cmd)
	return withNote(out, res.Note), 1, nil
}

func (b *Builtin) watch(ctx context.Context, tools Tools, arg string) (string, int, error) {
	pattern, cmd, ok := strings.Cut(arg, " -- ")
	if !ok && strings.HasPrefix(arg, "-- ") { // watch -- cmd: no pattern
		pattern, cmd = "", arg[3:]
	}
	pattern = strings.Trim(strings.TrimSpace(pattern), `"'`)
	cmd = strings.TrimSpace(cmd)
	if pattern == "" || cmd == "" {
		return "Usage: watch <pattern> -- <command>", 0, nil
	}
	res, err := tools.Spawn(ctx, SpawnRequest{Command: cmd, Background: true, WatchPatterns: []string{pattern}})
	if err != nil {
		return "", 1, err
	}
	out := fmt.Sprintf("Started %s in the background: %s\nI'll tell you when a line of its output matches %q.", res.ID, cmd, pattern)
	return withNote(out, res.Note), 1, nil
}

func (b *Builtin) sh(ctx context.Context, tools Tools, cmd string) (string, int, error) {
	if cmd == "" {
		return "Usage: sh <command>", 0, nil
	}
	res, err := tools.Spawn(ctx, SpawnRequest{Command: cmd, Timeout: b.shTimeout})
	if err != nil {
		return "", 1, err
	}
	var out string
	switch {
	case res.State == StateKilled:
		out = fmt.Sprintf("Stopped after %s.", b.shTimeout)
	case res.ExitCode != nil:
		out = fmt.Sprintf("Exit code %d.", *res.ExitCode)
	case res.State == StateRunning && res.ID != "":
		out = fmt.Sprintf("Still running after %s; it goes on in the background as %s (try: wait %s, or kill %s).", b.shTimeout, res.ID, res.ID, res.ID)
	case res.State == StateRunning:
		out = fmt.Sprintf("Still running after %s.", b.shTimeout)
	default:
		out = fmt.Sprintf("Stopped after %s.", b.shTimeout)
	}
	out = withOutput(out, res.Output)
	return withNote(out, res.Note), 1, nil
}

func (b *Builtin) ps(ctx context.Context, tools Tools) (string, int, error) {
	list, err := tools.List(ctx)
	if err != nil {
		return "", 1, err
	}
	if len(list) == 0 {
		return "No processes in this chat yet. Try: run sleep 3; echo done", 1, nil
	}
	var sb strings.Builder
	sb.WriteString("Processes:")
	for _, p := range list {
		fmt.Fprintf(&sb, "\n%s  %s  %s", p.ID, describeState(p), clip(p.Command, 80))
	}
	return sb.String(), 1, nil
}

// onProcess runs poll, log, wait or kill on the process named by arg.
func (b *Builtin) onProcess(ctx context.Context, tools Tools, word, arg string) (string, int, error) {
	f := strings.Fields(arg)
	if len(f) == 0 {
		if word == "wait" {
			return "Usage: wait <id> [seconds]", 0, nil
		}
		return "Usage: " + word + " <id>", 0, nil
	}
	calls := 0
	id := f[0]
	if !strings.HasPrefix(id, "proc_") && !strings.EqualFold(id, "last") {
		return fmt.Sprintf("I don't know a process called “%s”. Process ids look like proc_…; send ps to see them.", clip(id, 40)), 0, nil
	}
	if strings.EqualFold(id, "last") {
		calls++
		list, err := tools.List(ctx)
		if err != nil {
			return "", calls, err
		}
		if id = newest(list); id == "" {
			return "No processes in this chat yet.", calls, nil
		}
	}
	calls++
	switch word {
	case "poll":
		p, err := tools.Poll(ctx, id)
		if err != nil {
			return "", calls, err
		}
		out := fmt.Sprintf("%s: %s\nCommand: %s", p.ID, describeState(p), p.Command)
		return withOutput(out, p.Output), calls, nil
	case "log":
		ch, err := tools.Log(ctx, id, -1, builtinLogBytes)
		if err != nil {
			return "", calls, err
		}
		if ch.Total == 0 && ch.Text == "" {
			return id + " has no output yet.", calls, nil
		}
		status := "still running"
		if ch.Ended {
			status = "ended"
		}
		return fmt.Sprintf("Output of %s (bytes %d-%d of %d, %s):\n%s", id, ch.Offset, ch.Next, ch.Total, status, strings.TrimRight(ch.Text, "\n")), calls, nil
	case "wait":
		timeout := DefaultWaitTimeout
		if len(f) > 1 {
			s, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "s"), 64)
			if err != nil || s <= 0 {
				return "Usage: wait <id> [seconds]", calls - 1, nil
			}
			timeout = min(time.Duration(s*float64(time.Second)), MaxWaitTimeout)
		}
		p, err := tools.Wait(ctx, id, timeout)
		if err != nil {
			return "", calls, err
		}
		if !p.Ended() {
			return fmt.Sprintf("%s is still running after %s.", p.ID, timeout), calls, nil
		}
		return fmt.Sprintf("%s finished: %s.", p.ID, describeState(p)), calls, nil
	case "kill":
		p, err := tools.Kill(ctx, id)
		if err != nil {
			return "", calls, err
		}
		return fmt.Sprintf("Stopped %s (%s).", p.ID, describeState(p)), calls, nil
	}
	return "", calls, errors.New("unknown command " + word)
}

// newest returns the id of the most recently started process in list.
func newest(list []ProcessInfo) string {
	var best ProcessInfo
	for _, p := range list {
		if best.ID == "" || p.StartedAt.After(best.StartedAt) {
			best = p
		}
	}
	return best.ID
}

// describeState renders a process's state for people.
func describeState(p ProcessInfo) string {
	switch {
	case p.State == StateExited && p.ExitCode != nil:
		return fmt.Sprintf("exited with code %d", *p.ExitCode)
	case p.State == StateKilled && p.Signal != "":
		return "killed (" + p.Signal + ")"
	case p.State == StateKilled:
		return "killed"
	case p.State == StateLost:
		return "lost (exit status unknown)"
	case p.State == StateFailedStart:
		return "failed to start"
	case p.State == StateExited:
		return "exited (exit status unknown)"
	case p.State == "":
		return "unknown state"
	}
	return p.State
}

func withNote(out, note string) string {
	if note == "" {
		return out
	}
	return out + "\nNote: " + note
}

func withOutput(out, output string) string {
	output = strings.TrimRight(output, "\n")
	if strings.TrimSpace(output) == "" {
		return out + "\n(no output)"
	}
	return out + "\n" + tailChars(output, builtinOutputChars)
}

// tailChars keeps the last n runes of s, marking the cut.
func tailChars(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}
