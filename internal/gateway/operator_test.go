package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/config"
)

// TestDeliveryToAFailedPluginSaysSo: when a plugin's breaker has tripped, the reason a delivery
// waits is that plugin's failure and its last crash, not "not loaded".
func TestDeliveryToAFailedPluginSaysSo(t *testing.T) {
	t.Parallel()
	w := newWorldWith(t, map[string]extraPlugin{"probe": {dir: "../plugin/testdata/probe", config: map[string]any{"token": "t"},
		limits: &config.Limits{CallTimeout: config.Duration(200 * time.Millisecond)}}})
	p := w.g.runtime.Get("probe")
	for p.Status() == nil {
		p.Send(context.Background(), "main", abi.OutboundMessage{ChatID: "9", Text: "spin"})
	}
	_, err := transport{w.g}.Limit("probe")
	if err == nil || !strings.Contains(err.Error(), "failed after repeated crashes") || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("limit of a failed plugin: %v", err)
	}
	if _, err := (transport{w.g}).Limit("gone"); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Fatalf("limit of a missing plugin: %v", err)
	}
}
