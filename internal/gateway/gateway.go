// Package gateway assembles the host: it opens the store, loads the plugins, runs the poll and
// tick loops, serves the HTTP endpoints (health, metrics, admin API, webhooks), and connects
// inbound events to sessions and turns and outbound messages to the delivery ledger.
package gateway

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/turn"
)

// Gateway is a running hermes-host.
type Gateway struct {
	cfg      *config.Config
	log      *slog.Logger
	db       *sql.DB
	kv       *kv.Store
	egress   *egress.Client
	env      *plugin.Env
	runtime  *plugin.Runtime
	registry *prometheus.Registry
	demo     *demoChat
	kernel   *session.Kernel
	procs    *process.Registry
	ledger   *delivery.Ledger
	engine   *turn.Engine

	loopsMu sync.Mutex
	loops   map[loopKey]*loop // poll and tick loops by plugin and profile
}

// Open prepares a gateway from cfg: the data directory, the database and the plugin runtime.
// Plugins are loaded by Run (or by LoadPlugins, for commands that only inspect them).
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Gateway, error) {
	db, err := store.Open(filepath.Join(cfg.DataDir, "hermes.db"), store.Options{})
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, log: log, db: db, registry: prometheus.NewRegistry(), loops: map[loopKey]*loop{}, demo: newDemoChat()}
	g.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if g.kv, err = kv.Open(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	g.egress = egress.NewClient(egress.Limits{})
	g.env = &plugin.Env{Logger: log, KV: g.kv, Egress: g.egress}
	g.env.Sessions, g.env.Dispatcher, g.env.Sender = sessions{g}, dispatcher{g}, sender{g}
	if err := g.openCore(ctx); err != nil {
		db.Close()
		return nil, err
	}
	g.runtime, err = plugin.New(plugin.Config{
		Dir:      cfg.PluginsDir,
		CacheDir: filepath.Join(cfg.DataDir, "cache", "wazero"),
		Defaults: limits(cfg.Limits),
		Plugins:  pluginSettings(cfg),
		Env:      g.env,
		Logger:   log,
		Metrics:  plugin.NewMetrics(g.registry),
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return g, nil
}

func limits(l config.Limits) plugin.Limits {
	return plugin.Limits{
		MemoryPages: uint32(l.MemoryMiB * 16),
		CallTimeout: time.Duration(l.CallTimeout),
		PoolSize:    l.PoolSize,
		MaxInput:    l.MaxPayloadKiB << 10,
		MaxOutput:   l.MaxPayloadKiB << 10,
	}
}

func pluginSettings(cfg *config.Config) map[string]plugin.Settings {
	out := map[string]plugin.Settings{}
	for name, p := range cfg.Plugins {
		s := plugin.Settings{EgressNarrow: p.EgressNarrow, EgressExtra: p.EgressExtra, Profiles: map[string]json.RawMessage{}}
		if p.Limits != nil {
			s.Limits = limits(*p.Limits)
		}
		for profile := range p.Profiles {
			b, _ := p.ProfileJSON(profile)
			s.Profiles[profile] = b
		}
		out[name] = s
	}
	return out
}

// openCore opens the session kernel, the process registry, the delivery ledger, the agent and
// the turn engine.
func (g *Gateway) openCore(ctx context.Context) error {
	cfg := g.cfg
	var err error
	g.procs, err = process.New(ctx, g.db, process.Options{DataDir: cfg.DataDir, MaxAge: time.Duration(cfg.Processes.MaxAge),
		Env: childEnv(os.Environ(), cfg.EnvRefs), Logger: g.log})
	if err != nil {
		return err
	}
	keys := session.KeyOptions{ThreadsPerUser: cfg.Sessions.ThreadPerUser}
	if cfg.Sessions.GroupPerUser != nil {
		keys.SharedGroups = !*cfg.Sessions.GroupPerUser
	}
	reset := session.ResetPolicy{IdleAfter: time.Duration(cfg.Sessions.IdleMinutes) * time.Minute, AtHour: cfg.Sessions.DailyAtHour}
	switch cfg.Sessions.ResetMode {
	case "idle":
		reset.Mode = session.ResetIdle
	case "daily":
		reset.Mode = session.ResetDaily
	case "both":
		reset.Mode = session.ResetBoth
	}
	g.kernel, err = session.Open(ctx, g.db, session.Options{Keys: keys, AutoReset: reset, Processes: liveProcesses{g}})
	if err != nil {
		return err
	}
	g.ledger, err = delivery.Open(ctx, g.db, g.kernel, transport{g}, delivery.Options{Logger: g.log, Suppressed: g.consumed})
	if err != nil {
		return err
	}
	a, err := agent.New(cfg.Agent.Kind, agent.Config{BaseURL: cfg.Agent.BaseURL, Model: cfg.Agent.Model, APIKey: cfg.Agent.APIKey})
	if err != nil {
		return err
	}
	g.engine, err = turn.New(ctx, g.db, g.kernel, g.ledger, a, g.procs, router{g}, turn.Options{Logger: g.log, Notifications: cfg.Notifications})
	return err
}

// consumed reports whether a process notice is moot because the agent already read the result
// (with wait, log or kill) after the notice was queued.
func (g *Gateway) consumed(ctx context.Context, origin string) (bool, string) {
	if !strings.HasPrefix(origin, "proc_") {
		return false, ""
	}
	ok, err := g.procs.Consumed(ctx, origin)
	if err != nil || !ok {
		return false, ""
	}
	return true, "the agent already read the result of " + origin
}

// childEnv is the environment background processes start with: the host's, without the
// variables the configuration references (platform tokens, API keys) and without the per-process
// HERMES_SESSION_* variables the registry sets itself.
func childEnv(env, secrets []string) []string {
	drop := map[string]bool{}
	for _, name := range secrets {
		drop[name] = true
	}
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if drop[name] || strings.HasPrefix(name, "HERMES_SESSION_") || name == "HERMES_PROCESS_ID" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// liveProcesses tells auto-reset whether a key has a running background process.
type liveProcesses struct{ g *Gateway }

func (l liveProcesses) HasLiveProcess(ctx context.Context, key string) (bool, error) {
	list, err := l.g.procs.List(ctx)
	if err != nil {
		return true, err
	}
	for _, p := range list {
		if p.Stamp.Key == key && !p.State.Final() {
			return true, nil
		}
	}
	return false, nil
}

// Runtime is the plugin runtime.
func (g *Gateway) Runtime() *plugin.Runtime { return g.runtime }

// Close releases everything Open acquired.
func (g *Gateway) Close() {
	g.stopLoops()
	g.ledger.Stop()
	g.engine.Wait()
	g.procs.Close()
	g.kernel.Close()
	g.runtime.Close()
	g.egress.Close()
	g.db.Close()
}

// LoadPlugins scans the plugins directory once and starts loops for what loaded.
func (g *Gateway) LoadPlugins(ctx context.Context) []plugin.Rejection {
	rej := g.runtime.Scan(ctx)
	g.reconcileLoops(ctx)
	return rej
}

// Run serves until ctx is cancelled: it loads the plugins, watches the plugins directory for
// changes, runs the poll and tick loops, and serves HTTP on cfg.Listen. ready, if not nil, is
// called with the listening address once the server accepts connections.
func (g *Gateway) Run(ctx context.Context, ready func(addr string)) error {
	start := time.Now()
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.cfg.Listen, err)
	}
	g.LoadPlugins(ctx)
	if err := g.startCore(ctx); err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	go g.watch(ctx)
	g.log.Info("hermes-host serving", "addr", ln.Addr().String(), "plugins", len(g.runtime.Plugins()),
		"data_dir", g.cfg.DataDir, "plugins_dir", g.cfg.PluginsDir, "startup", time.Since(start).Round(time.Millisecond))
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	g.stopLoops()
	g.log.Info("hermes-host stopped")
	return nil
}

// startCore recovers background processes, reconciles the ledger and starts the turn engine.
// Plugins are loaded first, so pending deliveries find their plugin.
func (g *Gateway) startCore(ctx context.Context) error {
	rep, err := g.procs.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recovering background processes: %w", err)
	}
	if len(rep.Adopted)+rep.Exited+rep.Lost+rep.Killed > 0 {
		g.log.Info("background processes recovered", "adopted", len(rep.Adopted), "ended_while_down", rep.Exited,
			"lost", rep.Lost, "killed", rep.Killed, "reclaimed_events", rep.Reclaimed)
	}
	reconciled, err := g.ledger.Start(ctx)
	if err != nil {
		return fmt.Errorf("starting the delivery ledger: %w", err)
	}
	if len(reconciled) > 0 {
		g.log.Warn("deliveries interrupted by the last stop were marked failed (outcome unknown), not resent", "count", len(reconciled))
	}
	return g.engine.Start(ctx)
}

// watch rescans the plugins directory when it changes (and every few seconds, in case the
// file system does not report events).
func (g *Gateway) watch(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(g.cfg.PluginsDir); err != nil {
			w.Close()
			w = nil
		}
	}
	var events <-chan fsnotify.Event
	if w != nil {
		defer w.Close()
		events = w.Events
	} else {
		g.log.Warn("plugins directory not watched; rescanning periodically", "dir", g.cfg.PluginsDir, "error", err)
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			debounce = time.After(250 * time.Millisecond) // let a copy finish
			continue
		case <-debounce:
		case <-tick.C:
		}
		debounce = nil
		g.LoadPlugins(ctx)
	}
}

// dispatch hands the events a plugin returned (from webhook or poll) to the turn engine.
func (g *Gateway) dispatch(ctx context.Context, c plugin.Caller, events []abi.InboundEvent) error {
	for _, ev := range events {
		ev.Source.Platform, ev.Source.Profile = c.Platform, c.Profile
		if _, err := g.engine.Dispatch(ctx, c.Plugin, c.Profile, ev); err != nil {
			if abi.CodeOf(err) == abi.CodeBadRequest {
				// A malformed event is logged and skipped; it will not improve on retry.
				g.log.Warn("inbound event rejected", "plugin", c.Plugin, "profile", c.Profile, "id", ev.ID, "error", err)
				continue
			}
			return err
		}
	}
	return nil
}
