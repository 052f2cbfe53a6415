package abi

import (
	"encoding/json"
	"strings"
	"testing"
)

// An event a Go plugin leaves without a kind goes on the wire as a message (the schema requires
// a kind); a kind that is set is kept, and the rest of the event is encoded as before.
func TestInboundEventAlwaysCarriesAKind(t *testing.T) {
	for _, c := range []struct{ kind, want string }{{"", EventMessage}, {EventObserve, EventObserve}, {EventSeed, EventSeed}} {
		b, err := json.Marshal(PollResult{Events: []InboundEvent{{ID: "u:1", Kind: c.kind, Source: Source{ChatType: "dm", ChatID: "42"}, Text: "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"kind":"`+c.want+`"`) {
			t.Errorf("kind %q encoded as %s", c.kind, b)
		}
		var back PollResult
		if err := json.Unmarshal(b, &back); err != nil || len(back.Events) != 1 {
			t.Fatalf("decode %s: %v", b, err)
		}
		if e := back.Events[0]; e.Kind != c.want || e.ID != "u:1" || e.Source.ChatID != "42" || e.Text != "hi" {
			t.Errorf("round trip of kind %q: %+v", c.kind, e)
		}
	}
	// A pointer encodes the same way.
	if b, _ := json.Marshal(&InboundEvent{Source: Source{ChatType: "dm"}}); !strings.Contains(string(b), `"kind":"message"`) {
		t.Errorf("*InboundEvent encoded as %s", b)
	}
}
