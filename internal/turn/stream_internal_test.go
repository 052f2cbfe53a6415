package turn

import (
	"fmt"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
)

// The edit-rate table does not keep an entry for every chat ever streamed to: once it holds
// 1,024 chats, those whose interval has passed are forgotten.
func TestEditRateTableBounded(t *testing.T) {
	e := &Engine{lastEdit: map[string]time.Time{}, botNext: map[string]time.Time{}, opt: Options{EditInterval: time.Nanosecond, EditsPerSecond: 1e9}}
	for i := range 5000 {
		s := &streamer{e: e, msg: delivery.Message{Plugin: "echo", Profile: "main", Target: abi.OutboundMessage{ChatID: fmt.Sprint(i)}}}
		if !s.waitGate(true) {
			t.Fatal("gate refused")
		}
	}
	if n := len(e.lastEdit); n > 1025 {
		t.Fatalf("%d chats remembered after 5,000 streams", n)
	}
}
