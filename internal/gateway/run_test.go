package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// TestListenerAnswersWhilePluginsSpinAtLoad: four plugin files spin while loading. The admin
// listener answers /healthz within a second of Run starting, and echo, a good plugin, loads and
// is listed while the spinners are still loading; they are rejected at their own deadline.
func TestListenerAnswersWhilePluginsSpinAtLoad(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.PluginsDir, cfg.Listen, cfg.AdminListen = dir, filepath.Join(dir, "plugins"), "127.0.0.1:0", "127.0.0.1:0"
	cfg.CompilationCache = wasmbuild.CompilationCacheDir(t)
	cfg.Demo.Plugin = ""
	cfg.Limits.CallTimeout = config.Duration(8 * time.Second)
	wasmbuild.CopyTo(t, "../../plugins/echo", filepath.Join(cfg.PluginsDir, "zz-echo.wasm"))
	cfg.Plugins = map[string]config.Plugin{"echo": {Profiles: map[string]map[string]any{"main": {"outbox_url": "http://127.0.0.1:1/"}}}}
	// Compile echo once, so that what is measured below is the loading order, not how long a
	// cold compile takes on a CPU the spinners share.
	warm, err := Open(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	warm.LoadPlugins(context.Background())
	warm.Close()
	for file, flags := range map[string]string{
		"spin-init.wasm":       "-X main.where=init",
		"spin-describe.wasm":   "-X main.where=describe",
		"spin-configure1.wasm": "-X main.where=configure -X main.name=spinc1",
		"spin-configure2.wasm": "-X main.where=configure -X main.name=spinc2",
	} {
		built, err := wasmbuild.BuildWith("../plugin/testdata/hostile/spinload", flags)
		if err != nil {
			t.Fatal(err)
		}
		if err := wasmbuild.CopyFile(built, filepath.Join(cfg.PluginsDir, file)); err != nil {
			t.Fatal(err)
		}
	}
	profile := map[string]map[string]any{"main": {}}
	cfg.Plugins["spinc1"], cfg.Plugins["spinc2"] = config.Plugin{Profiles: profile}, config.Plugin{Profiles: profile}

	ctx, cancel := context.WithCancel(context.Background())
	g, err := Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	runDone := make(chan error, 1)
	start := time.Now()
	go func() { runDone <- g.Run(ctx, func(_, admin string) { addrc <- admin }) }()
	defer func() { cancel(); <-runDone; g.Close() }()
	base := "http://" + <-addrc
	token, err := os.ReadFile(filepath.Join(dir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	getJSON := func(t *testing.T, url string, v any) int {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		return resp.StatusCode
	}

	var health struct {
		Status  string   `json:"status"`
		Loading []string `json:"loading"`
	}
	if code := getJSON(t, base+"/healthz", &health); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("/healthz answered %v after Run started, want under 1s", took)
	}
	// echo loads while the spinners are still loading (their deadline is 8 s away).
	for {
		var plugins struct {
			Plugins []struct{ Name string } `json:"plugins"`
		}
		getJSON(t, base+"/api/plugins", &plugins)
		if slices.ContainsFunc(plugins.Plugins, func(p struct{ Name string }) bool { return p.Name == "echo" }) {
			break
		}
		if time.Since(start) > 60*time.Second {
			t.Fatal("echo never loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	getJSON(t, base+"/healthz", &health)
	if health.Status != "loading" || len(health.Loading) == 0 {
		t.Fatalf("echo loaded, but the spinners are not reported loading: %+v", health)
	}
}
