package schema

import (
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

// Every export's result type is in the schema, and Validate tells a good result from bad ones
// with the place and the reason.
func TestValidate(t *testing.T) {
	for _, export := range []string{abi.ExportDescribe, abi.ExportConfigure, abi.ExportWebhook, abi.ExportPoll,
		abi.ExportSend, abi.ExportTick, abi.ExportJobs} {
		name := ResultOf(export)
		if name == "" {
			t.Fatalf("no result type for %s", export)
		}
		if _, err := schemaOf(name); err != nil {
			t.Errorf("%s: %v", export, err)
		}
	}
	if ResultOf("nope") != "" {
		t.Error("a result type for an unknown export")
	}
	cases := []struct {
		name, data, want string // want "": valid
	}{
		{"SendResult", `{"message_ids": ["1"]}`, ""},
		{"SendResult", `{}`, ""}, // posted, ids unknown (SPEC 2.6)
		{"SendResult", `sent!`, "not JSON"},
		{"SendResult", `{"error": {"kind": "maybe", "message": "x"}}`, "/error/kind"},
		{"WebhookResult", `{"response": {"status": 200}}`, ""},
		{"WebhookResult", `{"response": {"status": 999}}`, "/response/status"},
		{"WebhookResult", `{"response": {"status": 200}, "extra": 1}`, "extra"},
		// An event's kind is required and one of the listed values, never empty (issue 32).
		{"PollResult", `{"events": [{"kind": "message", "source": {"chat_type": "dm"}}]}`, ""},
		{"PollResult", `{"events": [{"kind": "", "source": {"chat_type": "dm"}}]}`, "/events/0/kind"},
		{"PollResult", `{"events": [{"source": {"chat_type": "dm"}}]}`, "kind"},
		{"PollResult", `{"events": [{"kind": "chat", "source": {"chat_type": "dm"}}]}`, "/events/0/kind"},
	}
	for _, c := range cases {
		err := Validate(c.name, []byte(c.data))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v", c.name, c.data, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s: %v; want an error naming %q", c.name, c.data, err, c.want)
		}
	}
	if err := Validate("NoSuchType", []byte(`{}`)); err == nil {
		t.Error("an unknown type validated")
	}
}
