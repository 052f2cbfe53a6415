package console

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/plugin"
)

// The plugins page shows a plugin's last crash before its breaker trips.
func TestPluginsPageShowsTheLastCrash(t *testing.T) {
	at := time.Date(2026, 12, 2, 7, 30, 0, 0, time.UTC)
	v := pluginsView{Plugins: []pluginRow{{Info: plugin.Info{Name: "flaky", State: "active", Crashes: 2,
		LastCrash: "plugin flaky crashed in send (exit): the guest called proc_exit(3)", LastCrashAt: &at}, Stats: &pluginStats{}}}}
	var buf bytes.Buffer
	if err := parsePages()["plugins"].t.ExecuteTemplate(&buf, "layout.html", view{Title: "Plugins", Nav: "plugins", Session: &login{csrf: "x"}, Data: v, Now: at, Prefix: Prefix}); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "Last crash") || !strings.Contains(out, "2026-12-02 07:30:00 · plugin flaky crashed in send (exit): the guest called proc_exit(3)") {
		t.Fatalf("the page:\n%s", out)
	}
}
