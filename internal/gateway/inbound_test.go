package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// TestWebhookAnsweredWhileEverySendSpins: every send instance of a plugin is stuck in a send
// (one of them to the very chat the webhook is about, so it also holds that chat's boundary).
// The webhook is still answered while both sends spin, because inbound calls have instances
// sends cannot take and the event is recorded without waiting for the chat's boundary; the
// event is applied once the sends are stopped at their deadline.
func TestWebhookAnsweredWhileEverySendSpins(t *testing.T) {
	w := newWorldWith(t, map[string]extraPlugin{"probe": {dir: "../plugin/testdata/probe", config: map[string]any{"token": "t"},
		limits: &config.Limits{PoolSize: 2, CallTimeout: config.Duration(testdeadline.Scale(3 * time.Second))}}})
	ctx := context.Background()
	for _, chat := range []string{"1", "2"} {
		src := abi.Source{Platform: "probe", Profile: "main", ChatType: abi.ChatDM, ChatID: chat}
		key, err := w.g.kernel.Key(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.g.ledger.Enqueue(ctx, delivery.Message{Plugin: "probe", Profile: "main", Key: key,
			Target: abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: chat}, Text: "spin", Kind: delivery.KindNotice}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(testdeadline.Scale(20 * time.Second)); ; time.Sleep(5 * time.Millisecond) {
		rows, err := w.g.ledger.List(ctx, delivery.Filter{State: delivery.Sending})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two sends never started: %+v", rows)
		}
	}
	// Three webhooks, one after the other. Each is answered while both sends still spin (their
	// rows still "sending"): the answer did not wait for a send instance or the chat's boundary.
	// How long an answer takes on a shared machine is logged, not asserted (a benchmark's job).
	for i := range 3 {
		start := time.Now()
		resp, err := http.Post(w.srv.URL+"/hooks/probe/main", "text/plain", strings.NewReader(fmt.Sprintf("are you there %d?", i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != 200 {
			t.Fatalf("webhook status %d", resp.StatusCode)
		}
		rows, err := w.g.ledger.List(ctx, delivery.Filter{State: delivery.Sending})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 2 {
			t.Fatalf("webhook %d answered after %v, once %d of the two spinning sends were still sending: it waited for a send", i, took, len(rows))
		}
		t.Logf("webhook %d answered in %v while both send instances spin", i, took)
	}
	// The event was recorded; it is applied to chat 1 once the spinning send there is stopped.
	for deadline := time.Now().Add(testdeadline.Scale(20 * time.Second)); ; time.Sleep(20 * time.Millisecond) {
		var state string
		w.g.db.QueryRow(`SELECT state FROM turn_inbox WHERE event_id = 'w:are you there 0?'`).Scan(&state)
		if state != "" && state != "received" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook's event is still %q", state)
		}
	}
}
