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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/adminapi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/console"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/demo"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/hostcall"
	"github.com/hermes-host/hermes-host/internal/inbound"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/loop"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/turn"
	"github.com/hermes-host/hermes-host/internal/webhook"
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
	demo     *demo.Outbox
	console  *console.Console
	// token is the admin token the console's login page checks (empty: nobody logs in).
	token  string
	kernel *session.Kernel
	procs  *process.Registry
	ledger *delivery.Ledger
	engine *turn.Engine
	agent  agent.Agent
	door   *inbound.Door
	loops  *loop.Supervisor
	// running is set by Run: from then on, each plugin load reconciles the loops at once.
	running atomic.Bool
}

// Open prepares a gateway from cfg: the data directory, the database and the plugin runtime.
// Plugins are loaded by Run (or by LoadPlugins, for commands that only inspect them).
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Gateway, error) {
	db, err := store.Open(filepath.Join(cfg.DataDir, "hermes.db"), store.Options{})
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, log: log, db: db, registry: prometheus.NewRegistry(), demo: &demo.Outbox{}}
	g.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if g.kv, err = kv.Open(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	g.egress = egress.NewClient(egress.Limits{})
	g.env = &plugin.Env{Logger: log, KV: g.kv, Egress: g.egress}
	g.runtime, err = plugin.New(plugin.Config{
		Dir:          cfg.PluginsDir,
		CacheDir:     filepath.Join(cfg.DataDir, "cache", "wazero"),
		Defaults:     limits(cfg.Limits),
		Plugins:      pluginSettings(cfg),
		Env:          g.env,
		Logger:       log,
		Metrics:      plugin.NewMetrics(g.registry),
		ScaleProcs:   true,
		StrictEgress: cfg.StrictEgress,
		OnChange: func() {
			if g.running.Load() {
				g.loops.Reconcile(context.Background())
			}
		},
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := g.openCore(ctx); err != nil {
		g.runtime.Close()
		db.Close()
		return nil, err
	}
	g.door = &inbound.Door{Engine: g.engine, Log: log}
	g.env.Sessions = hostcall.Sessions{Kernel: g.kernel}
	g.env.Dispatcher = g.door
	g.env.Sender = hostcall.Sender{Kernel: g.kernel, Ledger: g.ledger, Route: g.runtime.PluginFor}
	g.loops = loop.New(g.runtime, g.door, log)
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
		s := plugin.Settings{EgressNarrow: p.EgressNarrow, EgressExtra: p.EgressExtra, EgressInternal: p.EgressInternal,
			EgressAlias: p.EgressAlias,
			Profiles:    map[string]json.RawMessage{}}
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
	g.agent, err = agent.New(cfg.Agent.Kind, agentConfig(cfg.Agent, g.log, agent.NewMetrics(g.registry)))
	if err != nil {
		return err
	}
	stream := cfg.Agent.Stream == nil || *cfg.Agent.Stream
	g.engine, err = turn.New(ctx, g.db, g.kernel, g.ledger, g.agent, g.procs, g.runtime, turn.Options{Logger: g.log,
		Notifications: cfg.Notifications, MaxAnswerMessages: cfg.Agent.MaxMessages,
		CanEdit: func(name string) bool {
			p := g.runtime.Get(name)
			return stream && p != nil && p.Manifest().Has(abi.CapEdit)
		}})
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
	g.loops.Stop()
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
	g.loops.Reconcile(ctx)
	return rej
}

// Run serves until ctx is cancelled. It opens the listener first (health and the admin API
// answer at once), starts the core (process recovery, ledger, turn engine), then loads the
// plugins in parallel: each plugin serves, and its loops start, as soon as it has loaded,
// whatever the other files do. Then it watches the plugins directory for changes. ready, if not
// nil, is called with the listening address once the server accepts connections.
func (g *Gateway) Run(ctx context.Context, ready func(addr string)) error {
	start := time.Now()
	token, err := adminToken(filepath.Join(g.cfg.DataDir, TokenFile))
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	g.token = token
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.cfg.Listen, err)
	}
	if err := g.startCore(ctx); err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	srv.RegisterOnShutdown(g.console.Close) // its event streams end when the server stops
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	g.log.Info("hermes-host listening", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	g.running.Store(true)
	g.LoadPlugins(ctx)
	go plugin.Watch(ctx, g.cfg.PluginsDir, g.log, func(ctx context.Context) { g.LoadPlugins(ctx) })
	g.log.Info("hermes-host serving", "addr", ln.Addr().String(), "plugins", len(g.runtime.Plugins()),
		"data_dir", g.cfg.DataDir, "plugins_dir", g.cfg.PluginsDir, "startup", time.Since(start).Round(time.Millisecond))
	g.log.Info("console: open http://"+ln.Addr().String()+"/ and log in with the admin token",
		"token_file", filepath.Join(g.cfg.DataDir, TokenFile))
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
	g.loops.Stop()
	g.log.Info("hermes-host stopped")
	return nil
}

// startCore recovers background processes, reconciles the ledger and starts the turn engine.
// It runs before the plugins load: a pending delivery whose plugin is still loading waits for it
// without using up an attempt (see transport.Limit).
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
	if err := g.checkAgent(ctx); err != nil {
		return err
	}
	return g.engine.Start(ctx)
}

// agentConfig maps the agent settings to agent.Config.
func agentConfig(c config.Agent, log *slog.Logger, m *agent.Metrics) agent.Config {
	return agent.Config{BaseURL: c.BaseURL, Model: c.Model, APIKey: c.APIKey, SystemPrompt: c.SystemPrompt,
		MaxRounds: c.MaxRounds, Timeout: time.Duration(c.Timeout), TurnTimeout: time.Duration(c.TurnTimeout),
		Temperature: c.Temperature, MaxTokens: c.MaxTokens, Headers: c.Headers,
		NoTools: c.Tools != nil && !*c.Tools, NoStream: c.Stream != nil && !*c.Stream, Logger: log, Metrics: m}
}

// checkAgent asks the model server whether it serves the configured model (agent.check).
func (g *Gateway) checkAgent(ctx context.Context) error {
	checker, ok := g.agent.(interface{ Check(context.Context) error })
	if !ok || g.cfg.Agent.Check == "off" {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := checker.Check(cctx)
	switch {
	case err == nil:
		g.log.Info("model server ready", "base_url", g.cfg.Agent.BaseURL, "model", g.cfg.Agent.Model)
		return nil
	case g.cfg.Agent.Check == "fail":
		return err
	}
	g.log.Error("model server check failed; serving anyway (agent.check: warn)", "error", err)
	return nil
}

// Handler is the gateway's HTTP interface: the webhooks, the admin API, the demo chat and the
// console.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	hook := &webhook.Handler{Plugins: g.runtime, Door: g.door, Log: g.log}
	mux.Handle(webhook.Pattern, hook)
	api := &adminapi.API{Plugins: g.runtime, Sessions: g.kernel, Processes: g.procs, Ledger: g.ledger,
		Metrics: g.registry, Ping: g.db.PingContext}
	api.Register(mux)
	g.demo.Register(mux)
	g.console = &console.Console{Tokens: console.StaticToken(g.token), Plugins: g.runtime, Sessions: g.kernel,
		Processes: g.procs, Ledger: g.ledger, Metrics: g.registry, Log: g.log}
	g.demoChat(hook)
	g.console.Register(mux)
	return mux
}

// The demo platform: the echo plugin's profile main, whose outbox the embedded defaults point at
// this host's /demo/outbox; the console chats on it as user "me" in chat 42 (the README's curl
// examples use the same chat).
const (
	demoPlugin, demoProfile = "echo", "main"
	demoChatID, demoUserID  = "42", "me"
)

// demoChat connects the console's chat to the demo platform. The chat's session key uses the
// plugin's name as its platform (echo's platform is "echo"): the plugin may not be loaded yet.
func (g *Gateway) demoChat(hook http.Handler) {
	key, err := g.kernel.Key(abi.Source{Platform: demoPlugin, Profile: demoProfile, ChatType: abi.ChatDM,
		ChatID: demoChatID, UserID: demoUserID})
	if err != nil {
		g.log.Warn("console: no demo chat", "error", err)
		return
	}
	chat := &demo.Chat{ChatID: demoChatID, UserID: demoUserID,
		Hook: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.SetPathValue("plugin", demoPlugin)
			r.SetPathValue("profile", demoProfile)
			hook.ServeHTTP(w, r)
		})}
	g.demo.Chat = chat
	g.console.Chat, g.console.ChatKey = chat, key
	g.console.ChatName = "chat " + demoChatID + " on " + demoPlugin + "/" + demoProfile
}
