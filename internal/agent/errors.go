package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. An *APIError matches ErrUnauthorized, ErrRateLimited or ErrUnavailable by its
// status (errors.Is); the others are wrapped with detail.
var (
	ErrUnauthorized = errors.New("agent: model rejected the credentials")      // HTTP 401, 403
	ErrRateLimited  = errors.New("agent: model rate limited")                  // HTTP 429
	ErrUnavailable  = errors.New("agent: model service unavailable")           // HTTP 5xx
	ErrTimeout      = errors.New("agent: model did not answer in time")        // Config.Timeout or TurnTimeout passed
	ErrBadResponse  = errors.New("agent: model sent a response we cannot use") // malformed JSON, no choices, broken stream
	ErrConnect      = errors.New("agent: model endpoint unreachable")          // connection refused, DNS, TLS
	// ErrRedirect: the endpoint answered with a redirect. Redirects are never followed: the
	// request carries the API key and the conversation.
	ErrRedirect = errors.New("agent: model endpoint redirected; redirects are not followed")
	// ErrContextOverflow: the server refused the request because the conversation does not fit
	// the model's context (an *APIError whose message or type says so matches it). The turn
	// engine compresses the conversation and tries the turn once more.
	ErrContextOverflow = errors.New("agent: the conversation does not fit the model's context")
)

// TimeoutError says which limit ended a turn and what was running when it passed. It matches
// ErrTimeout (errors.Is).
type TimeoutError struct {
	Limit  string        // LimitModelCall or LimitTurn
	After  time.Duration // the limit
	During string        // what was running: "a model call", "the terminal tool"
}

// Error names the limit, its setting and what was running.
func (e *TimeoutError) Error() string {
	if e.Limit == LimitTurn {
		return fmt.Sprintf("agent: the turn took longer than %s (agent.turn_timeout) during %s", e.After, e.During)
	}
	return fmt.Sprintf("%v (no answer within %s, agent.timeout)", ErrTimeout, e.After)
}

// Is matches ErrTimeout.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// Limits a TimeoutError names (hermes_agent_timeouts_total{limit}).
const (
	LimitModelCall = "model_call" // Config.Timeout: one model call
	LimitTurn      = "turn"       // Config.TurnTimeout: the whole turn, tools included
)

// contextMarkers are what vLLM, llama.cpp server, Ollama and OpenAI write in an error about a
// prompt longer than the model's context (matched case-insensitively, in the message or type).
var contextMarkers = []string{"maximum context length", "exceed_context_size", "exceeds the available context",
	"context length", "context window", "too many tokens", "context_length_exceeded"}

// overflow reports whether e says the prompt does not fit the model's context.
func (e *APIError) overflow() bool {
	low := strings.ToLower(e.Message + " " + e.Type + " " + e.Code)
	for _, m := range contextMarkers {
		if strings.Contains(low, m) {
			return true
		}
	}
	return false
}

// APIError is a non-2xx answer of the model endpoint (or an error event in a stream). The
// engine shows it (UserMessage) instead of waiting: a 429's RetryAfter is reported, never slept
// on inside a turn.
type APIError struct {
	Status     int           // HTTP status (of the stream's response for an error event)
	Type       string        // error.type of the body, if any
	Code       string        // error.code of the body, if any
	Message    string        // error.message of the body, or the start of the body
	RetryAfter time.Duration // from Retry-After (or retry-after-ms); 0: not given
	// Hint is what to do about it, for the user and the operator ("" when nothing specific).
	Hint string
	// InStream marks an error event inside a streamed answer (the response itself was a 200):
	// Status is then the event's code, or the response's status when it gives none.
	InStream bool
}

// Error renders the status, the message and the retry delay.
func (e *APIError) Error() string {
	var b strings.Builder
	if e.InStream {
		fmt.Fprintf(&b, "agent: model endpoint: error event in the stream, status %d", e.Status)
	} else {
		fmt.Fprintf(&b, "agent: model endpoint: HTTP %d", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Is matches the sentinel of e's status class.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Status == 401 || e.Status == 403
	case ErrRateLimited:
		return e.Status == 429
	case ErrUnavailable:
		return e.Status >= 500
	case ErrContextOverflow:
		return e.overflow()
	}
	return false
}

// Hints for errors real servers send, matched on the server's own message. The first match wins.
var hints = []struct {
	match []string // any of these, case-insensitive
	hint  string
}{
	{[]string{"does not support tools"},
		"This model cannot use tools. The operator can pick a model with tool support, or set agent.tools: false."},
	{[]string{"requires --jinja", "unsupported param: tools"},
		"The llama.cpp server needs --jinja to use tools. The operator can restart it with --jinja, or set agent.tools: false."},
	{[]string{"--enable-auto-tool-choice"},
		"vLLM was started without tool calling. The operator can restart it with --enable-auto-tool-choice --tool-call-parser <parser>, or set agent.tools: false."},
	{contextMarkers,
		"The conversation no longer fits the model's context. Send /compress to shorten it, or /new to start over."},
	{[]string{"loading model"},
		"The model is still loading. Try again in a minute."},
	{[]string{"try pulling it first"},
		"The model is not installed on the Ollama server. The operator needs to pull it (ollama pull) or fix agent.model."},
	{[]string{"does not exist", "model not found", "no such model", "not found, try", "unknown model"},
		"The model server does not serve this model. The operator needs to fix agent.model (GET base_url/models lists what it serves)."},
}

// hintFor returns the hint for an error answer of the endpoint at base.
func hintFor(status int, msg, base string) string {
	low := strings.ToLower(msg)
	for _, h := range hints {
		for _, m := range h.match {
			if strings.Contains(low, strings.ToLower(m)) {
				return h.hint
			}
		}
	}
	switch {
	case status == 404 && !strings.HasSuffix(strings.TrimRight(base, "/"), "/v1"):
		return "The model server has no " + base + "/chat/completions. The operator probably needs /v1 at the end of agent.base_url (like http://127.0.0.1:8000/v1)."
	case status == 404:
		return "The model server has no " + base + "/chat/completions. The operator needs to check agent.base_url."
	case status == 401 || status == 403:
		return "The operator needs to check the agent's API key (agent.api_key)."
	}
	return ""
}

// UserMessage returns a short text for the user about a turn's error, suitable for the chat:
// what went wrong and what to do about it.
func UserMessage(err error) string {
	var (
		ae *APIError
		te *TimeoutError
	)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "Stopped."
	case errors.As(err, &ae) && ae.InStream:
		msg := fmt.Sprintf("The model server failed while writing the answer (%d: %s).", ae.Status, clip(ae.Message, 160))
		if ae.Hint != "" {
			return msg + " " + ae.Hint
		}
		return msg + " Try again."
	case errors.Is(err, ErrRateLimited):
		if errors.As(err, &ae) && ae.RetryAfter > 0 {
			return "The model is rate limited right now. Try again in " + roundDuration(ae.RetryAfter) + "."
		}
		return "The model is rate limited right now. Try again in a little while."
	case errors.Is(err, ErrUnauthorized):
		return "The model rejected the gateway's credentials. The operator needs to check the agent's API key."
	case errors.Is(err, ErrRedirect):
		return "The model server answered with a redirect, which the gateway does not follow. The operator needs to set agent.base_url to the server's real address."
	case errors.Is(err, ErrConnect):
		return "The model server cannot be reached. The operator needs to check that it is running and that agent.base_url is right."
	case errors.As(err, &ae) && ae.Hint != "":
		return fmt.Sprintf("The model server refused the request (HTTP %d: %s). %s", ae.Status, clip(ae.Message, 160), ae.Hint)
	case errors.Is(err, ErrUnavailable):
		if errors.As(err, &ae) && ae.Message != "" {
			return fmt.Sprintf("The model service failed (HTTP %d: %s). Try again later.", ae.Status, clip(ae.Message, 160))
		}
		return "The model service is unavailable right now. Try again later."
	case errors.As(err, &te) && te.Limit == LimitTurn:
		return fmt.Sprintf("This answer took longer than the time a turn may take (%s, agent.turn_timeout) while %s was running, so I stopped it. Try again, or run long commands in the background.",
			roundDuration(te.After), te.During)
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "The model took too long to answer. Try again."
	case errors.Is(err, ErrBadResponse):
		return "The model sent an answer I could not read. Try again."
	case errors.As(err, &ae):
		return fmt.Sprintf("The model server refused the request (HTTP %d: %s). Start over with /new if it keeps happening.", ae.Status, clip(ae.Message, 160))
	}
	return "Something went wrong while answering. Try again."
}

// roundDuration renders d for people: whole seconds (at least 1s), minutes above 90s.
func roundDuration(d time.Duration) string {
	if d > 90*time.Second {
		return d.Round(time.Minute).String()
	}
	if d < time.Second {
		d = time.Second
	}
	return d.Round(time.Second).String()
}

// parseRetryAfter reads retry-after-ms or Retry-After (seconds or an HTTP date) relative to now.
func parseRetryAfter(ms, ra string, now time.Time) time.Duration {
	if n, err := strconv.ParseFloat(strings.TrimSpace(ms), 64); err == nil && n > 0 {
		return time.Duration(n * float64(time.Millisecond))
	}
	ra = strings.TrimSpace(ra)
	if ra == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(ra, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(ra); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
