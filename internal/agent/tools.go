package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Tool names and limits of the model-facing tools.
const (
	ToolTerminal = "terminal"
	ToolProcess  = "process"

	// RefusedOnNotification is the tool result of terminal and process(kill) on a synthetic turn.
	RefusedOnNotification = "refused: this is a background-process notification turn; notification turns cannot run or kill commands (approvals are denied automatically)"

	// ToolsOffResult is the tool result of any call when the operator turned the tools off
	// (Config.NoTools): the model was offered none, and a call it makes anyway is not run.
	ToolsOffResult = "refused: tools are off on this host (the operator set agent.tools: false); answer in text"
	// NotGrantedResult is the tool result of a call the chat's profile is not granted.
	NotGrantedResult = "refused: tools are off in this chat (the operator grants them per profile); answer in text"

	MaxCommandTimeout = 600 * time.Second // the longest foreground terminal timeout
	toolOutputChars   = 8000              // output kept in one tool result (the tail)
	toolLogBytes      = 8000              // bytes one process(log) reads
)

// toolSchemas returns the tools in the OpenAI function-calling format.
func toolSchemas(cmdTimeout time.Duration) []any {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	boolean := func(desc string) map[string]any { return map[string]any{"type": "boolean", "description": desc} }
	integer := func(desc string) map[string]any { return map[string]any{"type": "integer", "description": desc} }
	fn := func(name, desc string, props map[string]any, required ...string) map[string]any {
		return map[string]any{"type": "function", "function": map[string]any{
			"name": name, "description": desc,
			"parameters": map[string]any{"type": "object", "properties": props, "required": required},
		}}
	}
	return []any{
		fn(ToolTerminal, "Run a shell command (sh -c) on the host. In the foreground (the default) it waits "+
			"until the command ends or timeout seconds pass, and returns its output and exit code. With "+
			"background=true it starts the command and returns its process id at once: set "+
			"notify_on_complete=true to be told in a later turn when it ends, or watch_patterns to be told "+
			"when an output line matches one of them (use one or the other). Manage background processes "+
			"with the process tool.",
			map[string]any{
				"command":            str("The shell command to run."),
				"background":         boolean("Start the command in the background and return its process id at once."),
				"notify_on_complete": boolean("Background only: start a new turn in this conversation when the process ends."),
				"watch_patterns": map[string]any{"type": "array", "items": map[string]any{"type": "string"},
					"description": "Background only: start a new turn when an output line matches one of these."},
				"timeout": integer(fmt.Sprintf("Foreground only: seconds to wait before giving up (default %d, max %d).",
					int(cmdTimeout/time.Second), int(MaxCommandTimeout/time.Second))),
			}, "command"),
		fn(ToolProcess, "Manage this conversation's background processes: list them, poll one (state and "+
			"recent output), read its log, wait for it to end, or kill it. Reading the log of an ended "+
			"process, waiting for it or killing it means you have seen its result: no notification follows.",
			map[string]any{
				"action":  map[string]any{"type": "string", "enum": []string{"list", "poll", "log", "wait", "kill"}, "description": "What to do."},
				"id":      str("The process id (proc_…); required by every action but list."),
				"offset":  integer("log: the byte offset to read from; omit to read the end of the output."),
				"timeout": integer(fmt.Sprintf("wait: seconds to wait (default %d, max %d).", int(DefaultWaitTimeout/time.Second), int(MaxWaitTimeout/time.Second))),
			}, "action"),
	}
}

// toolArgs are the arguments of terminal and process, read leniently: models sometimes send
// numbers and booleans as strings, or one pattern as a string.
type toolArgs struct {
	Command          string   `json:"command"`
	Background       flexBool `json:"background"`
	NotifyOnComplete flexBool `json:"notify_on_complete"`
	WatchPatterns    flexList `json:"watch_patterns"`
	Timeout          flexNum  `json:"timeout"`
	Action           string   `json:"action"`
	ID               string   `json:"id"`
	Offset           flexNum  `json:"offset"`
}

type flexBool bool

func (b *flexBool) UnmarshalJSON(p []byte) error {
	var s string
	if json.Unmarshal(p, &s) == nil {
		v, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil && s != "" {
			return fmt.Errorf("want a boolean, got %q", s)
		}
		*b = flexBool(v)
		return nil
	}
	var v *bool
	if err := json.Unmarshal(p, &v); err != nil {
		return errors.New("want a boolean")
	}
	*b = flexBool(v != nil && *v)
	return nil
}

type flexNum struct {
	V   float64
	Set bool
}

func (n *flexNum) UnmarshalJSON(p []byte) error {
	var s string
	if json.Unmarshal(p, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return nil
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", s)
		}
		*n = flexNum{v, true}
		return nil
	}
	var v *float64
	if err := json.Unmarshal(p, &v); err != nil {
		return errors.New("want a number")
	}
	if v != nil {
		*n = flexNum{*v, true}
	}
	return nil
}

type flexList []string

func (l *flexList) UnmarshalJSON(p []byte) error {
	var s string
	if json.Unmarshal(p, &s) == nil {
		if s != "" {
			*l = flexList{s}
		}
		return nil
	}
	var v []string
	if err := json.Unmarshal(p, &v); err != nil {
		return errors.New("want a list of strings")
	}
	*l = v
	return nil
}

// seconds converts n (seconds) to a duration within (0, max], def when unset or not positive.
func (n flexNum) seconds(def, max time.Duration) time.Duration {
	if !n.Set || n.V <= 0 {
		return def
	}
	if n.V >= max.Seconds() {
		return max
	}
	return time.Duration(n.V * float64(time.Second))
}

// ErrNotGranted is what Tools return for a tool the operator did not grant the chat's profile
// (the turn engine's tools do). A call refused so is counted as not_granted.
var ErrNotGranted = errors.New("that tool is not enabled for this chat (the operator grants tools per profile)")

// Reasons a tool call is refused (hermes_agent_tool_calls_refused_total{reason}).
const (
	RefusedToolsOff     = "tools_off"    // Config.NoTools: the operator turned the tools off
	RefusedNotGranted   = "not_granted"  // the chat's profile is not granted the tool
	RefusedNotification = "notification" // a notification turn asked to run or kill a command
)

// runTool executes one tool call and returns its result (a JSON object as text). Failures are
// results too ({"error": …}); only ctx's error aborts the turn, and the caller checks it. A call
// that is refused (tools off, not granted, a notification turn's side effect) is reported to
// refused with its reason; the model hears why in the result.
func runTool(ctx context.Context, t *Turn, name, args string, cmdTimeout time.Duration, toolsOff bool, refused func(reason string)) string {
	switch {
	case toolsOff:
		// The model was offered no tools; a call it makes anyway (some models hallucinate
		// them, and text can be crafted to ask for them) must not run.
		refused(RefusedToolsOff)
		return errorResult("%s", ToolsOffResult)
	case t.Tools == nil:
		refused(RefusedNotGranted)
		return errorResult("%s", NotGrantedResult)
	}
	var a toolArgs
	if strings.TrimSpace(args) != "" {
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return errorResult("invalid arguments for %s: %v", name, err)
		}
	}
	tools := refusing{t.Tools, refused}
	switch name {
	case ToolTerminal:
		if t.Synthetic {
			refused(RefusedNotification)
			return errorResult("%s", RefusedOnNotification)
		}
		return terminal(ctx, tools, a, cmdTimeout)
	case ToolProcess:
		if t.Synthetic && strings.EqualFold(a.Action, "kill") {
			refused(RefusedNotification)
			return errorResult("%s", RefusedOnNotification)
		}
		return process(ctx, tools, a)
	}
	return errorResult("unknown tool %q: the tools are %s and %s", name, ToolTerminal, ToolProcess)
}

// refusing reports the calls its Tools refuse as not granted (ErrNotGranted).
type refusing struct {
	Tools
	refused func(reason string)
}

func (r refusing) check(err error) {
	if errors.Is(err, ErrNotGranted) {
		r.refused(RefusedNotGranted)
	}
}

func (r refusing) Spawn(ctx context.Context, req SpawnRequest) (SpawnResult, error) {
	res, err := r.Tools.Spawn(ctx, req)
	r.check(err)
	return res, err
}

func (r refusing) List(ctx context.Context) ([]ProcessInfo, error) {
	l, err := r.Tools.List(ctx)
	r.check(err)
	return l, err
}

func (r refusing) Poll(ctx context.Context, id string) (ProcessInfo, error) {
	p, err := r.Tools.Poll(ctx, id)
	r.check(err)
	return p, err
}

func (r refusing) Log(ctx context.Context, id string, offset int64, limit int) (LogChunk, error) {
	c, err := r.Tools.Log(ctx, id, offset, limit)
	r.check(err)
	return c, err
}

func (r refusing) Wait(ctx context.Context, id string, timeout time.Duration) (ProcessInfo, error) {
	p, err := r.Tools.Wait(ctx, id, timeout)
	r.check(err)
	return p, err
}

func (r refusing) Kill(ctx context.Context, id string) (ProcessInfo, error) {
	p, err := r.Tools.Kill(ctx, id)
	r.check(err)
	return p, err
}

func terminal(ctx context.Context, tools Tools, a toolArgs, cmdTimeout time.Duration) string {
	if strings.TrimSpace(a.Command) == "" {
		return errorResult("command is empty")
	}
	req := SpawnRequest{Command: a.Command, Background: bool(a.Background)}
	if req.Background {
		req.NotifyOnComplete = bool(a.NotifyOnComplete)
		req.WatchPatterns = a.WatchPatterns
	} else {
		req.Timeout = a.Timeout.seconds(cmdTimeout, MaxCommandTimeout)
	}
	res, err := tools.Spawn(ctx, req)
	if err != nil {
		return errorResult("%v", err)
	}
	out := map[string]any{}
	if res.ID != "" {
		out["id"] = res.ID
	}
	if res.Note != "" {
		out["note"] = res.Note
	}
	if req.Background {
		out["state"] = orDefault(res.State, StateRunning)
		out["notify_on_complete"] = req.NotifyOnComplete
		if len(req.WatchPatterns) > 0 {
			out["watch_patterns"] = req.WatchPatterns
		}
		return jsonResult(out)
	}
	if res.ExitCode != nil {
		out["exit_code"] = *res.ExitCode
	}
	switch {
	case res.State != "":
		out["state"] = res.State
	case res.ExitCode != nil:
		out["state"] = StateExited
	}
	out["output"] = tailChars(res.Output, toolOutputChars)
	if res.State == StateRunning || res.State == StateKilled { // a foreground command is only killed on timeout
		out["timed_out"] = true
	}
	return jsonResult(out)
}

func process(ctx context.Context, tools Tools, a toolArgs) string {
	action := strings.ToLower(strings.TrimSpace(a.Action))
	if action != "list" && strings.TrimSpace(a.ID) == "" {
		if action == "" {
			return errorResult("action is empty: want list, poll, log, wait or kill")
		}
		return errorResult("id is required for action %q", action)
	}
	switch action {
	case "list":
		list, err := tools.List(ctx)
		if err != nil {
			return errorResult("%v", err)
		}
		for i := range list {
			list[i].Output = tailChars(list[i].Output, toolOutputChars/max(1, len(list)))
		}
		if list == nil {
			list = []ProcessInfo{}
		}
		return jsonResult(map[string]any{"processes": list})
	case "poll":
		p, err := tools.Poll(ctx, a.ID)
		if err != nil {
			return errorResult("%v", err)
		}
		p.Output = tailChars(p.Output, toolOutputChars)
		return jsonResult(p)
	case "log":
		off := int64(-1)
		if a.Offset.Set && a.Offset.V >= 0 {
			off = int64(a.Offset.V)
		}
		ch, err := tools.Log(ctx, a.ID, off, toolLogBytes)
		if err != nil {
			return errorResult("%v", err)
		}
		return jsonResult(map[string]any{"id": a.ID, "output": ch.Text, "offset": ch.Offset, "next": ch.Next, "total": ch.Total, "ended": ch.Ended})
	case "wait":
		p, err := tools.Wait(ctx, a.ID, a.Timeout.seconds(DefaultWaitTimeout, MaxWaitTimeout))
		if err != nil {
			return errorResult("%v", err)
		}
		p.Output = tailChars(p.Output, toolOutputChars)
		return jsonResult(struct {
			ProcessInfo
			TimedOut bool `json:"timed_out,omitempty"`
		}{p, !p.Ended()})
	case "kill":
		p, err := tools.Kill(ctx, a.ID)
		if err != nil {
			return errorResult("%v", err)
		}
		p.Output = tailChars(p.Output, toolOutputChars)
		return jsonResult(p)
	}
	return errorResult("unknown action %q: want list, poll, log, wait or kill", a.Action)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func errorResult(format string, args ...any) string {
	return jsonResult(map[string]string{"error": fmt.Sprintf(format, args...)})
}

// jsonResult encodes v compactly, without HTML escaping (the model reads it).
func jsonResult(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return `{"error":"cannot encode the result"}`
	}
	return strings.TrimRight(b.String(), "\n")
}
