package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"
)

// OpenAI is the agent backed by an OpenAI-compatible chat-completions endpoint. Each turn POSTs
// {BaseURL}/chat/completions with a system prompt, the history and the user's text, and the
// terminal and process tools; tool calls run through Turn.Tools and their results go back to the
// model, until it answers in text or Config.MaxRounds model calls have been made.
type OpenAI struct {
	url        string
	model      string
	key        string
	timeout    time.Duration
	maxRounds  int
	prompt     string
	cmdTimeout time.Duration
	tools      json.RawMessage
	client     *http.Client
}

// OpenAI's defaults.
const (
	DefaultBaseURL        = "https://api.openai.com/v1"
	DefaultTimeout        = 120 * time.Second
	DefaultMaxRounds      = 8
	DefaultCommandTimeout = 60 * time.Second
	maxResponseBytes      = 8 << 20
	maxErrorBodyBytes     = 64 << 10
)

// DefaultSystemPrompt opens the system prompt unless Config.SystemPrompt replaces it.
const DefaultSystemPrompt = "You are Hermes, a helpful assistant reached through a chat platform. " +
	"Answer concisely in plain text suitable for a chat message."

// toolGuide is appended to every system prompt.
const toolGuide = "You can run shell commands on the host with the terminal tool. Short commands run in the " +
	"foreground and return their output. For anything long-running, use terminal with background=true and " +
	"notify_on_complete=true: you get a process id at once, and when the process ends a new turn starts with a " +
	"notification holding its exit code and output, so you do not need to poll or wait. Use watch_patterns " +
	"instead to be told when an output line matches. The process tool lists, polls, reads the log of, waits " +
	"for and kills background processes. To attach a file to your answer, put it on a line of its own as " +
	"MEDIA:<path>."

// syntheticGuide is appended on a synthetic (notification) turn.
const syntheticGuide = "This turn was started by the gateway, not by the user: the last message is a " +
	"notification about a background process. Tell the user briefly what happened (success or failure, " +
	"and the relevant output). You cannot run or kill commands in this turn; such requests are denied " +
	"automatically. Attachments are not sent."

// NewOpenAI returns the OpenAI-compatible agent. cfg.Model is required.
func NewOpenAI(cfg Config) (*OpenAI, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("agent: openai: model is empty")
	}
	base := strings.TrimRight(strings.TrimSpace(cfg.BaseURL), "/")
	if base == "" {
		base = DefaultBaseURL
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("agent: openai: base URL %q: want http:// or https://", cfg.BaseURL)
	}
	key := cfg.APIKey
	if key == "" && cfg.APIKeyEnv != "" {
		key = os.Getenv(cfg.APIKeyEnv)
	}
	o := &OpenAI{
		url:        base + "/chat/completions",
		model:      cfg.Model,
		key:        key,
		timeout:    cfg.Timeout,
		maxRounds:  cfg.MaxRounds,
		prompt:     cfg.SystemPrompt,
		cmdTimeout: cfg.CommandTimeout,
		client:     &http.Client{},
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	if o.maxRounds <= 0 {
		o.maxRounds = DefaultMaxRounds
	}
	if o.prompt == "" {
		o.prompt = DefaultSystemPrompt
	}
	if o.cmdTimeout <= 0 {
		o.cmdTimeout = DefaultCommandTimeout
	}
	o.cmdTimeout = min(o.cmdTimeout, MaxCommandTimeout)
	tools, err := json.Marshal(toolSchemas(o.cmdTimeout))
	if err != nil {
		return nil, err
	}
	o.tools = tools
	return o, nil
}

// Wire format of chat completions.
type (
	chatMessage struct {
		Role       string     `json:"role"`
		Content    *string    `json:"content"` // null on an assistant message with only tool calls
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	toolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	chatRequest struct {
		Model    string          `json:"model"`
		Messages []chatMessage   `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
	}
	chatResponse struct {
		Choices []struct {
			Message struct {
				Content   json.RawMessage `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct {
						Name      string          `json:"name"`
						Arguments json.RawMessage `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Error json.RawMessage `json:"error"`
	}
)

func strp(s string) *string { return &s }

// MaxRoundsNote ends the answer of a turn whose last allowed model call still asked for tools
// (the argument is Config.MaxRounds). Those last tool calls are not run.
const MaxRoundsNote = "(I stopped after %d steps without reaching a final answer. Ask me to continue.)"

// maxCallsPerRound bounds the tool calls run from one model response; the rest are answered
// with an error result (every call must get a result).
const maxCallsPerRound = 16

// Turn answers t; see OpenAI.
func (o *OpenAI) Turn(ctx context.Context, t *Turn) (*Reply, error) {
	msgs := o.messages(t)
	calls := 0
	for round := 1; ; round++ {
		content, tcs, err := o.complete(ctx, msgs)
		if err != nil {
			return nil, err
		}
		if len(tcs) == 0 {
			return finalReply(content, t.Synthetic, calls), nil
		}
		if round >= o.maxRounds {
			rep := finalReply(content, t.Synthetic, calls)
			note := fmt.Sprintf(MaxRoundsNote, o.maxRounds)
			if rep.Text != "" {
				note = rep.Text + "\n\n" + note
			}
			rep.Text = note
			return rep, nil
		}
		var c *string
		if content != "" {
			c = strp(content)
		}
		msgs = append(msgs, chatMessage{Role: RoleAssistant, Content: c, ToolCalls: tcs})
		for i, tc := range tcs {
			calls++
			var res string
			if i < maxCallsPerRound {
				res = runTool(ctx, t, tc.Function.Name, tc.Function.Arguments, o.cmdTimeout)
			} else {
				res = errorResult("not run: at most %d tool calls per response", maxCallsPerRound)
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			msgs = append(msgs, chatMessage{Role: RoleTool, Content: strp(res), ToolCallID: tc.ID})
		}
	}
}

// messages builds the opening messages: system prompt, history, then the turn's text.
func (o *OpenAI) messages(t *Turn) []chatMessage {
	sys := o.prompt + "\n\n" + toolGuide
	if where := describeSource(t); where != "" {
		sys += "\n\n" + where
	}
	if t.Synthetic {
		sys += "\n\n" + syntheticGuide
	}
	msgs := make([]chatMessage, 0, len(t.History)+2)
	msgs = append(msgs, chatMessage{Role: RoleSystem, Content: strp(sys)})
	for _, m := range t.History {
		switch m.Role {
		case RoleUser, RoleAssistant, RoleSystem:
			msgs = append(msgs, chatMessage{Role: m.Role, Content: strp(m.Text)})
		case RoleTool:
			// A transcript keeps no tool_call ids, and a tool message without its call is invalid:
			// replay earlier tool output as context.
			msgs = append(msgs, chatMessage{Role: RoleSystem, Content: strp("Earlier tool output:\n" + m.Text)})
		default:
			msgs = append(msgs, chatMessage{Role: RoleUser, Content: strp(m.Text)})
		}
	}
	return append(msgs, chatMessage{Role: RoleUser, Content: strp(t.Text)})
}

func describeSource(t *Turn) string {
	s := t.Source
	var parts []string
	if s.Platform != "" {
		parts = append(parts, "platform "+s.Platform)
	}
	if s.ChatType != "" {
		parts = append(parts, "chat type "+s.ChatType)
	}
	if s.ChatName != "" {
		parts = append(parts, "chat "+s.ChatName)
	}
	if s.UserName != "" {
		parts = append(parts, "user "+s.UserName)
	}
	if len(parts) == 0 {
		return ""
	}
	return "Conversation: " + strings.Join(parts, ", ") + "."
}

// complete makes one model call and returns its text and tool calls.
func (o *OpenAI) complete(ctx context.Context, msgs []chatMessage) (string, []toolCall, error) {
	body, err := json.Marshal(chatRequest{Model: o.model, Messages: msgs, Tools: o.tools})
	if err != nil {
		return "", nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, o.url, bytes.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if o.key != "" {
		req.Header.Set("Authorization", "Bearer "+o.key)
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return "", nil, o.transportError(ctx, rctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		if rerr != nil && ctx.Err() != nil {
			return "", nil, ctx.Err()
		}
		return "", nil, apiError(resp, raw)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return "", nil, o.transportError(ctx, rctx, err)
	}
	if len(raw) > maxResponseBytes {
		return "", nil, fmt.Errorf("%w: response larger than %d bytes", ErrBadResponse, maxResponseBytes)
	}
	return parseResponse(raw)
}

// transportError classifies a failed request: the turn's cancellation wins, then our timeout.
func (o *OpenAI) transportError(ctx, rctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if rctx.Err() != nil {
		return fmt.Errorf("%w (no answer within %s)", ErrTimeout, o.timeout)
	}
	return fmt.Errorf("agent: model endpoint: %w", err)
}

func parseResponse(raw []byte) (string, []toolCall, error) {
	var r chatResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	if len(r.Error) > 0 && string(r.Error) != "null" {
		return "", nil, fmt.Errorf("%w: error in a 2xx response: %s", ErrBadResponse, errorMessage(r.Error))
	}
	if len(r.Choices) == 0 {
		return "", nil, fmt.Errorf("%w: no choices", ErrBadResponse)
	}
	m := r.Choices[0].Message
	content, err := contentText(m.Content)
	if err != nil {
		return "", nil, err
	}
	var tcs []toolCall
	for i, c := range m.ToolCalls {
		var tc toolCall
		tc.ID = c.ID
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d", i)
		}
		tc.Type = orDefault(c.Type, "function")
		tc.Function.Name = c.Function.Name
		args := bytes.TrimSpace(c.Function.Arguments)
		if len(args) > 0 && args[0] == '"' {
			var s string
			if err := json.Unmarshal(args, &s); err != nil {
				return "", nil, fmt.Errorf("%w: tool call arguments: %v", ErrBadResponse, err)
			}
			tc.Function.Arguments = s
		} else if len(args) > 0 && string(args) != "null" {
			tc.Function.Arguments = string(args) // an object, as some servers send
		}
		tcs = append(tcs, tc)
	}
	return content, tcs, nil
}

// contentText reads message content: a string, null, or a list of parts with text.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("%w: message content: %v", ErrBadResponse, err)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "" || p.Type == "text" || p.Type == "output_text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

func apiError(resp *http.Response, raw []byte) *APIError {
	e := &APIError{
		Status:     resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("retry-after-ms"), resp.Header.Get("Retry-After"), time.Now()),
	}
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && len(body.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		}
		if json.Unmarshal(body.Error, &obj) == nil {
			e.Message, e.Type = obj.Message, obj.Type
			if obj.Code != nil {
				e.Code = fmt.Sprint(obj.Code)
			}
		} else {
			e.Message = errorMessage(body.Error)
		}
	}
	if e.Message == "" {
		e.Message = clip(strings.Join(strings.Fields(string(raw)), " "), 300)
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// errorMessage renders an "error" value: a string, or an object with a message.
func errorMessage(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return clip(s, 300)
	}
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return clip(obj.Message, 300)
	}
	return clip(string(raw), 300)
}

var reMedia = regexp.MustCompile(`^\s*MEDIA:\s*(\S.*?)\s*$`)

// finalReply turns the model's answer into a Reply: "MEDIA:<path>" lines become Media (dropped
// on a synthetic turn).
func finalReply(content string, synthetic bool, calls int) *Reply {
	rep := &Reply{ToolCalls: calls}
	var keep []string
	for _, l := range strings.Split(content, "\n") {
		if m := reMedia.FindStringSubmatch(l); m != nil {
			if !synthetic {
				rep.Media = append(rep.Media, m[1])
			}
			continue
		}
		keep = append(keep, l)
	}
	rep.Text = strings.TrimSpace(strings.Join(keep, "\n"))
	return rep
}
