package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/internal/config"
)

// TestDemoSettingsFollowTheAdminListener: the demo profile posts its replies to the admin
// listener it is served on, whatever its address, with egress granted to that address alone;
// the generated secret goes nowhere else (a configured outbox_url elsewhere is posted to without
// it, and the log says so); a secret the operator configured is theirs to send.
func TestDemoSettingsFollowTheAdminListener(t *testing.T) {
	cases := []struct {
		name       string
		listen     string // the admin listener's address as bound
		profile    map[string]any
		wantOutbox string
		wantSecret string
		wantEgress []string
		wantWarn   bool
	}{
		{name: "defaults", listen: "127.0.0.1:40123", profile: nil,
			wantOutbox: "http://127.0.0.1:40123/demo/outbox", wantSecret: "gen", wantEgress: []string{"127.0.0.1:40123"}},
		{name: "wildcard", listen: "[::]:9000", profile: map[string]any{},
			wantOutbox: "http://[::1]:9000/demo/outbox", wantSecret: "gen", wantEgress: []string{"[::1]:9000"}},
		{name: "outbox on this listener", listen: "127.0.0.1:9000", profile: map[string]any{"outbox_url": "http://127.0.0.1:9000/demo/outbox"},
			wantOutbox: "http://127.0.0.1:9000/demo/outbox", wantSecret: "gen"},
		{name: "outbox on the old default port", listen: "127.0.0.1:9000", profile: map[string]any{"outbox_url": "http://127.0.0.1:8485/demo/outbox"},
			wantOutbox: "http://127.0.0.1:8485/demo/outbox", wantWarn: true},
		{name: "the operator's secret", listen: "127.0.0.1:9000", profile: map[string]any{"outbox_url": "https://example.net/out", "secret": "mine"},
			wantOutbox: "https://example.net/out", wantSecret: "mine"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			cfg := &config.Config{Demo: config.Demo{Plugin: "echo", Profile: "main"},
				Plugins: map[string]config.Plugin{"echo": {Profiles: map[string]map[string]any{"main": c.profile}}}}
			g := &Gateway{cfg: cfg, log: slog.New(slog.NewTextHandler(&logs, nil)), demoSecret: "gen"}
			s, err := g.demoSettings(c.listen)
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Outbox, Secret string }
			var raw map[string]any
			json.Unmarshal(s.Profiles["main"], &raw)
			got.Outbox, _ = raw["outbox_url"].(string)
			got.Secret, _ = raw["secret"].(string)
			if got.Outbox != c.wantOutbox || got.Secret != c.wantSecret {
				t.Errorf("outbox %q secret %q; want %q and %q", got.Outbox, got.Secret, c.wantOutbox, c.wantSecret)
			}
			if !slices.Equal(s.EgressExtra, c.wantEgress) {
				t.Errorf("egress %v; want %v", s.EgressExtra, c.wantEgress)
			}
			if warned := strings.Contains(logs.String(), "not this host's admin listener"); warned != c.wantWarn {
				t.Errorf("warned %v; want %v (log: %s)", warned, c.wantWarn, logs.String())
			}
			if c.profile != nil && c.profile["secret"] == nil && cfg.Plugins["echo"].Profiles["main"]["secret"] != nil {
				t.Error("the configuration was changed")
			}
		})
	}
}
