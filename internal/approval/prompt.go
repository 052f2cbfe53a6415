package approval

import (
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// Button ids are "approve:<id>" and "deny:<id>": within the ABI's 64 bytes of [A-Za-z0-9:_-].
const (
	approvePrefix = "approve:"
	denyPrefix    = "deny:"
)

// Buttons are a request's answers, for platforms that show buttons (capability "buttons").
func Buttons(id string) []abi.Button {
	return []abi.Button{
		{ID: approvePrefix + id, Label: "Approve", Style: abi.ButtonPrimary},
		{ID: denyPrefix + id, Label: "Deny", Style: abi.ButtonDanger},
	}
}

// ParseButton reads a pressed button's id: the request it answers and whether it approves.
// ok is false for a button that is not an approval's.
func ParseButton(callbackID string) (id string, approve, ok bool) {
	if id, ok := strings.CutPrefix(callbackID, approvePrefix); ok && validID(id) {
		return id, true, true
	}
	if id, ok := strings.CutPrefix(callbackID, denyPrefix); ok && validID(id) {
		return id, false, true
	}
	return "", false, false
}

// validID reports whether id may be a request's id (newID's letters and digits).
func validID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// maxShown bounds the command a prompt quotes.
const maxShown = 400

// Prompt is the message that asks the requester: the command, why it asks, and how to answer
// without buttons.
func Prompt(r Record) string {
	cmd := r.Command
	if len(cmd) > maxShown {
		cmd = cmd[:maxShown] + "…"
	}
	return fmt.Sprintf("🔐 Approval needed (%s): the agent wants to run\n%s\n\nReply /approve %s to run it or /deny %s to refuse; "+
		"without an answer within %s it is denied.", r.Rule, cmd, r.ID, r.ID, r.ExpiresAt.Sub(r.CreatedAt).Round(time.Second))
}

// Answer is what the decider is told about their answer to r (err from Decide).
func Answer(r Record, err error) string {
	switch {
	case err == ErrNotFound:
		return "⚠️ There is no approval request with that id."
	case err == ErrNotYours:
		return fmt.Sprintf("⚠️ Only the user who asked (%s) can answer request %s.", who(r), r.ID)
	case err == ErrSettled:
		return fmt.Sprintf("Request %s is %s already (%s).", r.ID, r.State, r.Reason)
	case err != nil:
		return "⚠️ The answer was not recorded: " + err.Error()
	case r.State == StateApproved:
		return fmt.Sprintf("✅ Approved %s: running it.", r.ID)
	default:
		return fmt.Sprintf("🚫 Denied %s: it will not run.", r.ID)
	}
}

func who(r Record) string {
	if r.UserName != "" {
		return r.UserName
	}
	return r.Requester()
}

// Refusal is the error a turn's tool returns for a command that did not get approval.
type Refusal struct{ Record Record }

func (e *Refusal) Error() string {
	switch e.Record.State {
	case StateExpired:
		return fmt.Sprintf("the command needed approval (%s) and nobody answered in time, so it was denied (request %s)", e.Record.Rule, e.Record.ID)
	case StateVoided:
		return fmt.Sprintf("the approval request %s was voided (%s); the command did not run", e.Record.ID, e.Record.Reason)
	default:
		return fmt.Sprintf("the command needed approval (%s) and was denied: %s (request %s)", e.Record.Rule, e.Record.Reason, e.Record.ID)
	}
}
