package gateway

import (
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/internal/config"
)

// TestUnmatchedConfigWarns: configuration that matches nothing loaded is said: settings for a
// plugin that is not in the plugins directory, and profile keys the plugin's config_schema does
// not declare. Plugins only the embedded defaults configure (echo) are not.
func TestUnmatchedConfigWarns(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cfg := *w.g.cfg
	cfg.Plugins = map[string]config.Plugin{
		"echo":  {Profiles: map[string]map[string]any{"main": {"outbox_url": "http://127.0.0.1:1/", "outbox_ulr": "typo"}}},
		"slack": {Profiles: map[string]map[string]any{"main": {"token": "x"}}},
	}
	cfg.FilePlugins = []string{"echo", "slack"}
	got := unmatchedConfig(&cfg, w.g.runtime.Plugins())
	if len(got) != 2 || !strings.Contains(got[0], "plugins.echo.profiles.main: outbox_ulr not in the plugin's config_schema") ||
		!strings.Contains(got[1], "plugins.slack configures a plugin that is not loaded") {
		t.Fatalf("warnings %q", got)
	}
	cfg.FilePlugins = nil // only the defaults configure echo
	if got := unmatchedConfig(&cfg, w.g.runtime.Plugins()); len(got) != 0 {
		t.Fatalf("warnings for the defaults: %q", got)
	}
}
