package gateway

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// bareConfig is a configuration with no plugins in a data directory of the test's own.
func bareConfig(t *testing.T, source string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := defaultConfig(t)
	cfg.DataDir, cfg.PluginsDir, cfg.Store = dir, filepath.Join(dir, "plugins"), source
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.CompilationCache = wasmbuild.CompilationCacheDir(t)
	if err := os.MkdirAll(cfg.PluginsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestOpenFailsWithoutLeaks: wherever start-up fails, Open returns the error and has released
// what it had acquired: no goroutine of the database pool, the process registry, the ledger or
// the engine is left running (goleak).
func TestOpenFailsWithoutLeaks(t *testing.T) {
	cases := map[string]struct {
		prepare func(t *testing.T, cfg *config.Config)
		want    string
	}{
		// After the database: the test clock's file is read.
		"test clock": {func(t *testing.T, cfg *config.Config) {
			cfg.TestClock = filepath.Join(cfg.DataDir, "no-such-clock")
		}, "test clock"},
		// After the database: the demo secret cannot be read.
		"demo secret": {func(t *testing.T, cfg *config.Config) {
			os.Mkdir(filepath.Join(cfg.DataDir, DemoSecretFile), 0o700)
		}, DemoSecretFile},
		// After the egress client: the compilation cache is a file.
		"compilation cache": {func(t *testing.T, cfg *config.Config) {
			cfg.CompilationCache = filepath.Join(cfg.DataDir, "cache-file")
			os.WriteFile(cfg.CompilationCache, nil, 0o600)
		}, "compilation cache"},
		// After the plugin runtime: the process registry cannot make its log directory.
		"process registry": {func(t *testing.T, cfg *config.Config) {
			os.WriteFile(filepath.Join(cfg.DataDir, "proc"), nil, 0o600)
		}, "process"},
		// After the process registry (its goroutine runs), the session kernel, the ledger and the
		// auth gate: the agent cannot be built.
		"agent": {func(t *testing.T, cfg *config.Config) {
			cfg.Agent.Kind = "no-such-agent"
		}, "no-such-agent"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := bareConfig(t, "")
			c.prepare(t, cfg)
			ignore := goleak.IgnoreCurrent()
			g, err := Open(context.Background(), cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				g.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open: %v, want an error about %q", err, c.want)
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}

// TestRunFailsWithoutLeaks: when Run fails after Open succeeded (a listener's port is taken; the
// model server check fails after the registry recovered, the ledger started and, on PostgreSQL,
// the host took its lease), Run returns the error with everything it started stopped, and Close
// releases the rest: no goroutine is left (goleak).
func TestRunFailsWithoutLeaks(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// A closed port: the model server check is refused at once.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	modelDown := func(cfg *config.Config) {
		cfg.Agent.Kind, cfg.Agent.BaseURL, cfg.Agent.Model, cfg.Agent.Check = "openai", "http://"+closed.Addr().String()+"/v1", "m", "fail"
	}
	run := func(t *testing.T, source string, prepare func(cfg *config.Config)) {
		cfg := bareConfig(t, source)
		prepare(cfg)
		ignore := goleak.IgnoreCurrent()
		g, err := Open(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		err = g.Run(context.Background(), func(string, string) { t.Error("Run served") })
		g.Close()
		if err == nil {
			t.Fatal("Run succeeded")
		}
		goleak.VerifyNone(t, ignore)
	}
	t.Run("admin port taken", func(t *testing.T) {
		run(t, "", func(cfg *config.Config) { cfg.AdminListen = busy.Addr().String() })
	})
	t.Run("model server down", func(t *testing.T) { run(t, "", modelDown) })
	t.Run("model server down/postgres", func(t *testing.T) { run(t, storetest.Postgres(t).Source, modelDown) })
}
