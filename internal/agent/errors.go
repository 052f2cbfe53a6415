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
	ErrTimeout      = errors.New("agent: model did not answer in time")        // Config.Timeout passed
	ErrBadResponse  = errors.New("agent: model sent a response we cannot use") // malformed JSON, no choices
)

// APIError is a non-2xx answer of the model endpoint. The engine shows it (UserMessage) instead
// of waiting: a 429's RetryAfter is reported, never slept on inside a turn.
type APIError struct {
	Status     int           // HTTP status
	Type       string        // error.type of the body, if any
	Code       string        // error.code of the body, if any
	Message    string        // error.message of the body, or the start of the body
	RetryAfter time.Duration // from Retry-After (or retry-after-ms); 0: not given
}

// Error renders the status, the message and the retry delay.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent: model endpoint: HTTP %d", e.Status)
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
	}
	return false
}

// UserMessage returns a short text for the user about a turn's error, suitable for the chat.
func UserMessage(err error) string {
	var ae *APIError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "Stopped."
	case errors.Is(err, ErrRateLimited):
		if errors.As(err, &ae) && ae.RetryAfter > 0 {
			return "The model is rate limited right now. Try again in " + roundDuration(ae.RetryAfter) + "."
		}
		return "The model is rate limited right now. Try again in a little while."
	case errors.Is(err, ErrUnauthorized):
		return "The model rejected the gateway's credentials. The operator needs to check the agent's API key."
	case errors.Is(err, ErrUnavailable):
		return "The model service is unavailable right now. Try again later."
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "The model took too long to answer. Try again."
	case errors.Is(err, ErrBadResponse):
		return "The model sent an answer I could not read. Try again."
	case errors.As(err, &ae):
		return fmt.Sprintf("The model refused the request (HTTP %d). Try rephrasing, or start over with /new.", ae.Status)
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
