package abi

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Error codes carried by Error. They are part of the ABI: plugins branch on them.
const (
	CodeBadRequest  = "bad_request" // the request was malformed or failed validation
	CodeDenied      = "denied"      // not permitted to this plugin, profile or kind
	CodeNotFound    = "not_found"   // the named object does not exist
	CodeUnavailable = "unavailable" // the service behind the function is not running in this host
	CodeTimeout     = "timeout"     // the operation did not finish in time
	CodeTooLarge    = "too_large"   // a payload exceeded its cap
	CodeConflict    = "conflict"    // a concurrent change won (retry with fresh state)
	CodeStale       = "stale"       // the target belongs to a conversation the user has left
	CodeUnsupported = "unsupported" // the plugin does not implement this export
	CodeIO          = "io"          // a network or storage operation failed before anything was sent
	// CodeUncertain: the request was sent but no answer came (connection lost, timeout): the
	// other side may have acted on it. Retrying may duplicate the effect.
	CodeUncertain = "uncertain"
	CodeClosed    = "closed"   // the connection is closed
	CodeInternal  = "internal" // a bug or panic on the other side; reported, not retried blindly
)

// Error is a failure carried as data across the boundary, in either direction.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfterMs, when positive, asks the caller to wait this long before trying again.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err as an *Error, wrapping a plain error as CodeInternal.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// CodeOf returns the code of err if it is (or wraps) an *Error, and "" otherwise.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// ParseError decodes a guest's error_set message: a JSON Error when it is one, otherwise the text
// as the message of a CodeInternal error.
func ParseError(msg string) *Error {
	var e Error
	if json.Unmarshal([]byte(msg), &e) == nil && e.Code != "" {
		return &e
	}
	return &Error{Code: CodeInternal, Message: msg}
}

// Reply is the envelope every host function returns (SPEC section 4): ok with the function's
// result (absent for the functions that have none), or not ok with an error.
type Reply struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"` // the function's reply message (e.g. a KVGetReply)
	Error  *Error          `json:"error,omitempty"`  // set when OK is false
}
