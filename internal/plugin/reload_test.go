package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// TestReloadClosesTheBreaker: a plugin failed after repeated crashes serves again after Reload
// (a fresh version from the same, unchanged file); an unknown name is ErrNoPlugin.
func TestReloadClosesTheBreaker(t *testing.T) {
	short := Settings{
		Limits:   Limits{CallTimeout: 300 * time.Millisecond, BreakerCrashes: 1, BreakerWindow: time.Minute},
		Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{}`)},
	}
	r := newRuntime(t, map[string]string{"loop.wasm": hostileTD + "loop"}, Config{Plugins: map[string]Settings{"loop": short}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatalf("rejections %+v", rej)
	}
	ctx := context.Background()
	p := r.Get("loop")
	p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1"}) // spins past its deadline: the breaker trips
	if info := p.Info(); info.State != "failed" || p.Active() {
		t.Fatalf("after a crash with BreakerCrashes 1: %+v", info)
	}
	sum := p.Info().SHA256
	info, err := r.Reload(ctx, "loop")
	if err != nil || info.State != "active" || !r.Get("loop").Active() || info.SHA256 != sum {
		t.Fatalf("reload: %+v %v", info, err)
	}
	if _, err := r.Reload(ctx, "nosuch"); !errors.Is(err, ErrNoPlugin) {
		t.Fatalf("reloading an unknown plugin: %v", err)
	}
}
