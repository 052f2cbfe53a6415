package hostcall

import (
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

// A plugin writes what people and the bot said, never the host's own system or notification
// entries (which the agent would take as trusted).
func TestPluginRoles(t *testing.T) {
	for in, want := range map[string]string{"": "user", "user": "user", "assistant": "assistant"} {
		if got, err := role(in); err != nil || got != want {
			t.Errorf("role(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"system", "notification", "tool", "User"} {
		if _, err := role(in); abi.CodeOf(err) != abi.CodeBadRequest {
			t.Errorf("role(%q): %v; want bad_request", in, err)
		}
	}
}
