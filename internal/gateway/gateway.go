// Package gateway assembles the host: it opens the store, loads the plugins, runs the poll and
// tick loops, serves the two HTTP listeners (the public one: webhooks only; the admin one:
// health, metrics, admin API, the demo platform and the console, behind a token), and connects
// inbound events through the authorization door to sessions and turns, and outbound messages to
// the delivery ledger.
package gateway

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/actions"
	"github.com/hermes-host/hermes-host/internal/adminapi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/clock"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/console"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/demo"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/hostcall"
	"github.com/hermes-host/hermes-host/internal/httpguard"
	"github.com/hermes-host/hermes-host/internal/inbound"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/loop"
	"github.com/hermes-host/hermes-host/internal/media"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/scheduler"
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
	shared   *shared // several hosts on one database (shared.go); nil for SQLite
	kv       *kv.Store
	egress   *egress.Client
	env      *plugin.Env
	runtime  *plugin.Runtime
	registry *prometheus.Registry
	demo     *demo.Outbox
	kernel   *session.Kernel
	procs    *process.Registry
	ledger   *delivery.Ledger
	media    *media.Store // the files of messages and answers (<data_dir>/media)
	// approvals records the commands that waited for a person (internal/approval).
	approvals *approval.Store
	engine    *turn.Engine
	agent     agent.Agent
	gate      *auth.Gate
	door      *inbound.Door
	loops     *loop.Supervisor
	console   *console.Console
	// running is set by Run: from then on, each plugin load reconciles the loops at once.
	running atomic.Bool
	// scanned is set once the plugins directory has been scanned (every file present at start
	// loaded or rejected); see pluginsLoading.
	scanned atomic.Bool
	// stopping is set when Run begins to drain: webhooks answer 503 with Retry-After.
	stopping atomic.Bool
	refusals *httpguard.Refusals
	// demoSecret is the demo platform's secret (empty: no demo).
	demoSecret string
	sched      *scheduler.Service
	clock      clock.Clock // what plugins see (hermes_clock, tick times): real unless --test-clock

	warnMu sync.Mutex
	warned map[string]bool // configuration warnings already logged

	bg sync.WaitGroup // the goroutines Run starts beside the core's: they end with Run's context
}

// Files the host keeps in its data directory besides the database.
const (
	TokenFile      = "admin.token" // the admin listener's bearer token
	DemoSecretFile = "demo.secret" // the demo platform's secret
)

// Options are what a gateway takes beside its configuration.
type Options struct {
	// Agent answers turns instead of the agent cfg.Agent names (the public host package's
	// Options.Agent); nil: that one.
	Agent agent.Agent
}

// Open prepares a gateway from cfg: the data directory, the database and the plugin runtime.
// Plugins are loaded by Run (or by LoadPlugins, for commands that only inspect them). When Open
// fails it has released whatever it had acquired: nothing it started keeps running.
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Gateway, error) {
	return OpenWith(ctx, cfg, log, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, cfg *config.Config, log *slog.Logger, opt Options) (_ *Gateway, err error) {
	if err := privateDir(cfg.DataDir, log); err != nil {
		return nil, err
	}
	// Background processes run as the host's user: keep them out of its memory and /proc entries.
	if err := process.ProtectHost(); err != nil {
		log.Warn("background processes may read the host's environment and memory", "error", err)
	}
	db, err := store.OpenSource(ctx, cfg.Store, cfg.DataDir, store.Options{})
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, log: log, db: db, registry: prometheus.NewRegistry(), demo: &demo.Outbox{}, clock: clock.Real{}, warned: map[string]bool{},
		agent: opt.Agent}
	defer func() {
		if err != nil {
			g.Close() // what was opened so far: Close skips the parts still nil
		}
	}()
	if cfg.TestClock != "" {
		fc, err := clock.NewFile(cfg.TestClock)
		if err != nil {
			return nil, err
		}
		g.clock = fc
		log.Warn("plugins see a test clock read from a file (--test-clock); for tests only", "file", cfg.TestClock)
	}
	g.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g.refusals = httpguard.NewRefusals(g.registry)
	if g.demoSecret, err = demoSecret(cfg); err != nil {
		return nil, err
	}
	g.demo.Secret = g.demoSecret
	if g.kv, err = kv.Open(ctx, db); err != nil {
		return nil, err
	}
	if g.shared, err = openShared(ctx, g); err != nil {
		return nil, err
	}
	g.egress = egress.NewClient(egress.Limits{})
	g.env = &plugin.Env{Logger: log, KV: g.kv, Egress: g.egress, Now: g.clock.Now}
	cache := cfg.CompilationCache
	if cache == "" {
		cache = filepath.Join(cfg.DataDir, "cache", "wazero")
	}
	g.runtime, err = plugin.New(plugin.Config{
		Dir:          cfg.PluginsDir,
		CacheDir:     cache,
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
		return nil, err
	}
	if err := g.openCore(ctx); err != nil {
		return nil, err
	}
	g.door = &inbound.Door{Engine: g.engine, Gate: g.gate, Log: log}
	g.env.Sessions = hostcall.Sessions{Kernel: g.kernel, Gate: g.gate}
	g.env.Dispatcher = g.door
	g.env.Sender = hostcall.Sender{Kernel: g.kernel, Ledger: g.ledger, Route: g.runtime.PluginFor, Loading: g.pluginsLoading}
	g.env.Agents = hostcall.Agents{Agent: g.agent, Log: log}
	g.loops = loop.New(g.runtime, g.door, log)
	g.loops.Clock = g.clock
	if g.shared != nil {
		g.loops.Leases = g.shared.leases // one poller per bot token, one scheduler per profile
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

// pluginSettings are the plugins' settings from cfg. The demo profile's are completed by
// demoSettings once the admin listener listens.
func pluginSettings(cfg *config.Config) map[string]plugin.Settings {
	out := map[string]plugin.Settings{}
	for name, p := range cfg.Plugins {
		s := plugin.Settings{EgressNarrow: p.EgressNarrow, EgressExtra: p.EgressExtra, EgressInternal: p.EgressInternal,
			EgressAlias: p.EgressAlias,
			Profiles:    map[string]json.RawMessage{}}
		if p.Limits != nil {
			s.Limits = limits(*p.Limits)
		}
		for profile, settings := range p.Profiles {
			b, _ := json.Marshal(settings)
			s.Profiles[profile] = b
		}
		out[name] = s
	}
	return out
}

// demoSettings are the demo plugin's settings once the admin listener listens on admin (the
// address as bound): the demo profile posts its replies to that listener's /demo/outbox, the
// one address its egress is granted for this, unless the operator configured an outbox_url;
// the generated demo secret goes to the admin listener only: a configured outbox_url elsewhere
// is posted to without it (and a warning says so).
func (g *Gateway) demoSettings(admin string) (plugin.Settings, error) {
	name, profile := g.cfg.Demo.Plugin, g.cfg.Demo.Profile
	s := pluginSettings(g.cfg)[name]
	dial, err := DialAddr(admin)
	if err != nil {
		return s, err
	}
	ps := maps.Clone(g.cfg.Plugins[name].Profiles[profile])
	if ps == nil {
		ps = map[string]any{}
	}
	own := "http://" + dial + "/demo/outbox"
	u, _ := ps["outbox_url"].(string)
	if u == "" {
		u, ps["outbox_url"] = own, own
		s.EgressExtra = append(slices.Clone(s.EgressExtra), dial)
	}
	if ps["secret"] == nil { // the generated secret (one the operator configured goes where told)
		if sameOrigin(u, own) {
			ps["secret"] = g.demoSecret
		} else {
			g.log.Warn("demo: outbox_url is not this host's admin listener: the demo's replies go there without the demo secret (leave outbox_url unset to use the admin listener)",
				"plugin", name, "profile", profile, "outbox_url", u, "admin", dial)
		}
	}
	b, err := json.Marshal(ps)
	if err != nil {
		return s, err
	}
	if s.Profiles == nil {
		s.Profiles = map[string]json.RawMessage{}
	}
	s.Profiles[profile] = b
	return s, nil
}

// demoSecret returns the demo platform's secret: the one its profile configures, else the one
// in the data directory (generated on first start). Empty when the demo is off.
func demoSecret(cfg *config.Config) (string, error) {
	if cfg.Demo.Plugin == "" {
		return "", nil
	}
	if s, ok := cfg.Plugins[cfg.Demo.Plugin].Profiles[cfg.Demo.Profile]["secret"].(string); ok && s != "" {
		return s, nil
	}
	return httpguard.Secret(filepath.Join(cfg.DataDir, DemoSecretFile))
}

// policies converts the configuration's access settings to the gate's policies.
func policies(cfg *config.Config) map[string]map[string]auth.Policy {
	out := map[string]map[string]auth.Policy{}
	for name, p := range cfg.Plugins {
		for profile, a := range p.Access {
			pol := auth.Policy{AllowAll: a.AllowAll, Users: a.Users, Pairing: a.Pairing == nil || *a.Pairing,
				Groups: map[string]auth.Group{}, Shell: slices.Contains(a.Tools, config.ToolShell),
				Processes: slices.Contains(a.Tools, config.ToolProcesses), Cron: slices.Contains(a.Tools, config.ToolCron)}
			for chat, gr := range a.Groups {
				pol.Groups[chat] = auth.Group{AllowAll: gr.AllowAll, Users: gr.Users, Observe: gr.Observe,
					RequireMention: gr.RequireMention == nil || *gr.RequireMention}
			}
			if out[name] == nil {
				out[name] = map[string]auth.Policy{}
			}
			out[name][profile] = pol
		}
	}
	return out
}

// openCore opens the session kernel, the process registry, the delivery ledger, the agent and
// the turn engine.
func (g *Gateway) openCore(ctx context.Context) error {
	cfg := g.cfg
	var err error
	popt := process.Options{DataDir: cfg.DataDir, MaxAge: time.Duration(cfg.Processes.MaxAge),
		Env: childEnv(os.Environ(), cfg.EnvRefs), Logger: g.log}
	if g.shared != nil {
		popt.Host = g.shared.id // the processes' rows name the host that runs them
	}
	g.procs, err = process.New(ctx, g.db, popt)
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
	lopt := delivery.Options{Logger: g.log, UndeliveredAfter: time.Duration(cfg.Deliveries.UndeliveredAfter), Metrics: delivery.NewMetrics(g.registry)}
	if g.shared != nil {
		lopt.Sweep, lopt.Leases = sweepEach, g.shared.leases
	}
	g.ledger, err = delivery.Open(ctx, g.db, g.kernel, transport{g}, lopt)
	if err != nil {
		return err
	}
	g.media, err = media.Open(ctx, g.db, filepath.Join(cfg.DataDir, "media"), media.Options{
		MaxFile: int64(cfg.Media.MaxFileMiB) << 20, MaxProfile: int64(cfg.Media.MaxProfileMiB) << 20, Retention: time.Duration(cfg.Media.Retention)})
	if err != nil {
		return err
	}
	g.gate, err = auth.Open(ctx, g.db, auth.Options{Policies: policies(cfg), Notifier: notifier{g}, Logger: g.log, Registerer: g.registry})
	if err != nil {
		return err
	}
	if g.agent == nil { // else the embedding program's own (Options.Agent)
		acfg := agentConfig(cfg.Agent, g.log, agent.NewMetrics(g.registry))
		acfg.Secrets = envValues(cfg.EnvRefs) // ${NAME} values: kept out of what the agent returns
		if g.agent, err = agent.New(cfg.Agent.Kind, acfg); err != nil {
			return err
		}
	}
	// /cron is kept apart from the engine's own commands: it reaches the scheduler plugin (the
	// loops are created after the engine, hence the indirection), and only for senders of the
	// profiles whose access grants the cron tool.
	g.sched = scheduler.New(g.runtime, func(plugin, profile string) { g.loops.Kick(plugin, profile) })
	commands := map[string]turn.Command{"cron": g.sched.Command(g.gate)}
	stream := cfg.Agent.Stream == nil || *cfg.Agent.Stream
	compressAt := 0.8
	if cfg.Agent.CompressAt != nil {
		compressAt = *cfg.Agent.CompressAt
	}
	topt := turn.Options{Logger: g.log, CompressAt: compressAt,
		EditInterval: time.Duration(cfg.Agent.EditInterval), EditsPerSecond: cfg.Agent.EditsPerSecond,
		Model: cfg.Agent.Model, Models: cfg.Agent.Models,
		CommandAllowed: func(ctx context.Context, name, plugin, profile string, src abi.Source) bool {
			return name != "cron" || g.gate.MayManageJobs(ctx, plugin, profile, src)
		},
		Notifications: cfg.Notifications, MaxAnswerMessages: cfg.Agent.MaxMessages, Commands: commands,
		CanEdit: func(name string) bool {
			p := g.runtime.Get(name)
			return stream && p != nil && p.Manifest().Has(abi.CapEdit)
		},
		Typing: typist{g}, Grants: g.gate.Tools, Metrics: turn.NewMetrics(g.registry),
		Media: g.media, Fetcher: fetcher{g}, WorkRoot: filepath.Join(cfg.DataDir, "work"),
		CanAttach: func(name string) bool {
			p := g.runtime.Get(name)
			return p != nil && p.Manifest().Has(abi.CapAttachments)
		}}
	if g.shared != nil {
		topt.Instance = g.shared.id
	}
	if topt.Approval, err = cfg.Approval.Policy(); err != nil {
		return err
	}
	g.approvals, err = approval.Open(ctx, g.db, approval.Options{Policy: topt.Approval, Instance: topt.Instance, Logger: g.log})
	if err != nil {
		return err
	}
	topt.Approvals = g.approvals
	topt.CanButtons = func(name string) bool {
		p := g.runtime.Get(name)
		return p != nil && p.Manifest().Has(abi.CapButtons)
	}
	g.engine, err = turn.New(ctx, g.db, g.kernel, g.ledger, g.agent, g.procs, g.runtime, topt)
	return err
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

// Close releases everything Open acquired. It also releases a gateway Open built only in part
// (Open calls it on its error paths): each part still nil is skipped.
func (g *Gateway) Close() {
	if g.loops != nil {
		g.loops.Stop()
	}
	if g.ledger != nil {
		g.ledger.Stop()
	}
	if g.engine != nil {
		g.engine.Wait()
	}
	g.bg.Wait()
	if g.procs != nil {
		g.procs.Close()
	}
	if g.kernel != nil {
		g.kernel.Close()
	}
	if g.runtime != nil {
		g.runtime.Close()
	}
	if g.egress != nil {
		g.egress.Close()
	}
	g.db.Close()
}

// LoadPlugins scans the plugins directory once and starts loops for what loaded.
func (g *Gateway) LoadPlugins(ctx context.Context) []plugin.Rejection {
	rej := g.runtime.Scan(ctx)
	g.scanned.Store(true)
	g.loops.Reconcile(ctx)
	for _, w := range unmatchedConfig(g.cfg, g.runtime.Plugins()) {
		g.warnOnce(w)
	}
	return rej
}

// pluginsLoading lists the plugin files not loaded yet. The listeners serve before the first scan
// of the plugins directory (Run), and until it has finished the runtime knows of no file at all:
// then every *.wasm file in the directory is still to load (the directory itself stands for
// them when it holds none yet), so /healthz says "loading", not "ok" with no plugins, a webhook
// answers 503 with Retry-After instead of 404, and a delivery waits for its plugin without
// using up an attempt. Afterwards it is the files being (re)loaded.
func (g *Gateway) pluginsLoading() []string {
	if g.scanned.Load() {
		return g.runtime.Loading()
	}
	files, _ := filepath.Glob(filepath.Join(g.cfg.PluginsDir, "*.wasm"))
	if len(files) == 0 {
		files = []string{g.cfg.PluginsDir}
	}
	return files
}

// unmatchedConfig lists configuration that matches nothing loaded: settings the file gives for
// a plugin that is not in the plugins directory, and profile keys a plugin's config_schema does
// not declare. Either is accepted, and most likely a mistake (a typo, a missing file).
func unmatchedConfig(cfg *config.Config, loaded []*plugin.Plugin) []string {
	byName := map[string]*plugin.Plugin{}
	for _, p := range loaded {
		byName[p.Name()] = p
	}
	var out []string
	for _, name := range cfg.FilePlugins {
		p := byName[name]
		if p == nil {
			out = append(out, fmt.Sprintf("config: plugins.%s configures a plugin that is not loaded (no %s.wasm in %s, or it was rejected)",
				name, name, cfg.PluginsDir))
			continue
		}
		profiles := make([]string, 0, len(cfg.Plugins[name].Profiles))
		for profile := range cfg.Plugins[name].Profiles {
			profiles = append(profiles, profile)
		}
		slices.Sort(profiles)
		for _, profile := range profiles {
			raw, err := cfg.Plugins[name].ProfileJSON(profile)
			if err != nil {
				continue
			}
			if unknown := plugin.UnknownConfigKeys(p.Manifest(), raw); len(unknown) > 0 {
				out = append(out, fmt.Sprintf("config: plugins.%s.profiles.%s: %s not in the plugin's config_schema (ignored by the plugin; a typo?)",
					name, profile, strings.Join(unknown, ", ")))
			}
		}
	}
	return out
}

// warnOnce logs a configuration warning the first time it occurs (plugins reload often).
func (g *Gateway) warnOnce(msg string) {
	g.warnMu.Lock()
	seen := g.warned[msg]
	g.warned[msg] = true
	g.warnMu.Unlock()
	if !seen {
		g.log.Warn(msg)
	}
}

// Run serves until ctx is cancelled. It opens the public listener (cfg.Listen: webhooks) and
// the admin listener (cfg.AdminListen: health, the admin API, the demo, the console) first,
// starts the core (process recovery, ledger, turn engine), then loads the plugins in parallel:
// each plugin serves, and its loops start, as soon as it has loaded, whatever the other files
// do. Then it watches the plugins directory for changes. ready, if not nil, is called with both
// addresses once the servers accept connections. When ctx ends (or a listener fails) Run
// drains (see drain) for at most cfg.ShutdownTimeout and returns. Whatever Run starts ends by
// the time it returns, on an error as when ctx ends (Close waits for what is still winding
// down).
func (g *Gateway) Run(ctx context.Context, ready func(public, admin string)) error {
	start := time.Now()
	stop := ctx.Done()
	// The host's work runs on a context of its own: ctx's end starts the drain, and the work is
	// cancelled only after it. What takes up new work (the plugins directory's watch, the
	// takeover of stopped hosts) ends when the drain begins.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	intake, stopIntake := context.WithCancel(ctx)
	defer stopIntake()
	tokenFile := filepath.Join(g.cfg.DataDir, TokenFile)
	token, err := httpguard.Secret(tokenFile)
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.cfg.Listen, err)
	}
	aln, err := net.Listen("tcp", g.cfg.AdminListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin_listen %s: %w", g.cfg.AdminListen, err)
	}
	if !loopback(aln.Addr()) {
		g.log.Warn("the admin listener is not on loopback: it is protected by its token only", "addr", aln.Addr().String())
	}
	if g.demoSecret != "" {
		ds, err := g.demoSettings(aln.Addr().String())
		if err != nil {
			ln.Close()
			aln.Close()
			return fmt.Errorf("demo: %w", err)
		}
		g.runtime.SetSettings(g.cfg.Demo.Plugin, ds)
	}
	if err := g.startCore(ctx, intake); err != nil {
		ln.Close()
		aln.Close()
		return err
	}
	public, admin := httpguard.NewServer(g.Handler()), httpguard.NewServer(g.AdminHandler(token))
	admin.RegisterOnShutdown(g.console.Close) // the console's event streams end when the server stops
	errc := make(chan error, 2)
	go func() { errc <- public.Serve(ln) }()
	go func() { errc <- admin.Serve(aln) }()
	g.log.Info("hermes-host listening", "addr", ln.Addr().String(), "admin", aln.Addr().String(), "admin_token_file", tokenFile)
	if ready != nil {
		ready(ln.Addr().String(), aln.Addr().String())
	}
	g.running.Store(true)
	g.bg.Go(func() {
		g.media.Run(intake, time.Hour, func(n int, err error) {
			if err != nil {
				g.log.Error("media: sweeping expired files failed", "error", err)
				return
			}
			g.log.Info("media: deleted files past their retention", "files", n)
		})
	})
	g.LoadPlugins(ctx)
	g.bg.Go(func() {
		plugin.Watch(intake, g.cfg.PluginsDir, g.log, func(ctx context.Context) { g.LoadPlugins(ctx) })
	})
	g.log.Info("hermes-host serving", "addr", ln.Addr().String(), "admin", aln.Addr().String(), "plugins", len(g.runtime.Plugins()),
		"data_dir", g.cfg.DataDir, "plugins_dir", g.cfg.PluginsDir, "startup", time.Since(start).Round(time.Millisecond))
	g.log.Info("console: open http://"+aln.Addr().String()+"/ and log in with the admin token", "token_file", tokenFile)
	var runErr error
	select {
	case <-stop:
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = err
		}
	}
	g.drain(stopIntake, public, admin)
	cancel()
	g.bg.Wait()
	g.log.Info("hermes-host stopped")
	return runErr
}

// drain stops the host in this order, within cfg.ShutdownTimeout (ARCHITECTURE.md, "Stopping"):
//
//  1. intake: webhooks answer 503 with Retry-After, the poll and tick loops stop (a WebSocket
//     platform's reading is its poll loop), plugin reloads start none again, and stopIntake
//     ends the plugins directory's watch and the takeover of stopped hosts;
//  2. turns: none starts, and no process event is taken up; the ones running get the timeout
//     less a reserve (a quarter, at most 5 s) to finish, then are cancelled and handed back
//     (turn.Engine.Drain);
//  3. deliveries: the lanes send what is due (the answers of the turns that finished among it)
//     until the timeout; then they stop after their current send, and what is left stays
//     pending for the next start;
//  4. the listeners close.
//
// Whatever is left (queued or handed-back turns, pending deliveries, unclaimed process events)
// is durable, and the next start, or another host sharing the database once this one's lease is
// released, takes it up once.
func (g *Gateway) drain(stopIntake context.CancelFunc, public, admin *http.Server) {
	begun := time.Now()
	timeout := time.Duration(g.cfg.ShutdownTimeout)
	if timeout <= 0 {
		timeout = 20 * time.Second // a configuration built without the defaults
	}
	deadline := begun.Add(timeout)
	g.log.Info("hermes-host stopping: finishing the turns and deliveries in progress (a second signal stops at once)",
		"shutdown_timeout", timeout)
	g.stopping.Store(true)
	g.running.Store(false)
	stopIntake()
	g.loops.Stop()

	reserve := min(timeout/4, 5*time.Second)
	tctx, stopTurns := context.WithDeadline(context.Background(), deadline.Add(-reserve))
	turnsDone := g.engine.Drain(tctx)
	stopTurns()
	dctx, stopDeliveries := context.WithDeadline(context.Background(), deadline)
	sent := g.ledger.Drain(dctx)
	stopDeliveries()
	g.ledger.Stop()

	sctx, stopServers := context.WithTimeout(context.Background(), time.Second)
	defer stopServers()
	public.Shutdown(sctx)
	admin.Shutdown(sctx)
	lvl := slog.LevelInfo
	if !turnsDone || !sent {
		lvl = slog.LevelWarn
	}
	g.log.Log(context.Background(), lvl, "hermes-host drained", "took", time.Since(begun).Round(time.Millisecond),
		"turns_finished", turnsDone, "deliveries_sent", sent,
		"left", "turns not finished were handed back and deliveries not sent stay pending: the next start takes them up")
}

// DialAddr is the address a client on this machine dials to reach a listener on listen (host:port):
// a wildcard or empty host is dialled on loopback.
func DialAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}

// sameOrigin reports whether the URLs a and b name the same scheme, host and port.
func sameOrigin(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Scheme == ub.Scheme && strings.EqualFold(ua.Host, ub.Host)
}

func loopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// Scheduler is the job service of scheduler plugins.
func (g *Gateway) Scheduler() *scheduler.Service { return g.sched }

// startCore recovers background processes, reconciles the ledger and starts the turn engine on
// ctx; the takeover of stopped hosts (several hosts on one database) runs until intake ends.
// It runs before the plugins load: a pending delivery whose plugin is still loading waits for it
// without using up an attempt (see transport.Limit).
func (g *Gateway) startCore(ctx, intake context.Context) error {
	rep, err := g.procs.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recovering background processes: %w", err)
	}
	if len(rep.Adopted)+rep.Exited+rep.Lost+rep.Killed > 0 {
		g.log.Info("background processes recovered", "adopted", len(rep.Adopted), "ended_while_down", rep.Exited,
			"lost", rep.Lost, "killed", rep.Killed, "reclaimed_events", rep.Reclaimed, "recorded_lost_by_another_host", len(rep.Retaken))
	}
	if len(rep.Corrupt) > 0 {
		g.log.Error("background-process checkpoints that cannot be decoded were left untouched", "ids", rep.Corrupt)
	}
	if g.shared != nil {
		// Alive before taking anything over: the others must not take this host's work.
		if err := g.shared.keepAlive(ctx, g); err != nil {
			return err
		}
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
	if err := g.engine.Start(ctx); err != nil {
		return err
	}
	if g.shared != nil {
		g.bg.Go(func() { g.shared.reap(intake, g) })
	}
	// /healthz's view of the store's writes: probed while a write path is refused and while
	// the host is idle (store.Health).
	g.bg.Go(func() { store.HealthOf(g.db).Watch(ctx, g.log) })
	return nil
}

// agentConfig maps the agent settings to agent.Config.
func agentConfig(c config.Agent, log *slog.Logger, m *agent.Metrics) agent.Config {
	return agent.Config{BaseURL: c.BaseURL, Model: c.Model, APIKey: c.APIKey, SystemPrompt: c.SystemPrompt,
		MaxRounds: c.MaxRounds, Timeout: time.Duration(c.Timeout), TurnTimeout: time.Duration(c.TurnTimeout),
		Temperature: c.Temperature, MaxTokens: c.MaxTokens, Headers: c.Headers, ContextTokens: c.ContextTokens,
		ShowReasoning: c.ShowReasoning, NoTools: c.Tools != nil && !*c.Tools, NoStream: c.Stream != nil && !*c.Stream,
		Vision: c.Vision, VisionModels: c.VisionModels, DocumentBytes: c.DocumentKiB << 10,
		Transcribe: transcribeConfig(c.Transcribe), Logger: log, Metrics: m}
}

// transcribeConfig maps agent.transcribe to the agent's; nil: not configured.
func transcribeConfig(t *config.Transcribe) *agent.TranscribeConfig {
	if t == nil {
		return nil
	}
	return &agent.TranscribeConfig{URL: t.URL, Model: t.Model, APIKey: t.APIKey, APIKeyEnv: t.APIKeyEnv, Timeout: time.Duration(t.Timeout)}
}

// envValues returns the values of the environment variables names (the configuration's ${NAME}
// references), skipping unset ones.
func envValues(names []string) []string {
	var out []string
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			out = append(out, v)
		}
	}
	return out
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

// Handler is the public listener: the webhooks, and nothing else. Requests from web pages are
// refused, and the demo profile is not served here.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(webhook.Pattern, &webhook.Handler{Plugins: g.runtime, Door: g.door, Log: g.log, Hidden: g.isDemo, Loading: g.pluginsLoading,
		Stopping: g.stopping.Load})
	return httpguard.NoBrowsers(mux, g.refusals)
}

// AdminHandler is the admin listener: health, metrics, the admin API, the demo platform and the
// console, behind the Host allow-list and the cross-site checks. The API and the demo take the
// bearer token; the console takes the same token on its login page and keeps a session cookie.
func (g *Gateway) AdminHandler(token string) http.Handler {
	mux := http.NewServeMux()
	// Guessing is throttled per client: the admin token (the API's bearer token and the
	// console's login share one count) and pairing codes (the API and the console share another,
	// so an operator who mistypes codes is not locked out of the API).
	tokens, codes := httpguard.NewThrottle(0, 0, g.log), httpguard.NewThrottle(0, 0, g.log)
	// The operator's actions, one set for the API and the console: the same checks either way.
	acts := &actions.Actions{Processes: g.procs, Plugins: g.runtime, Ledger: g.ledger, Log: g.log}
	api := &adminapi.API{Plugins: g.runtime, Sessions: g.kernel, Processes: g.procs, Ledger: g.ledger, Auth: g.gate,
		Metrics: g.registry, Ping: g.db.PingContext, Writes: store.HealthOf(g.db), Loading: g.pluginsLoading, Jobs: g.sched,
		Stopping: g.stopping.Load, State: g.db, Throttle: codes, Actions: acts}
	api.Register(mux)
	g.console = &console.Console{Tokens: console.StaticToken(token), Plugins: g.runtime, Sessions: g.kernel,
		Processes: g.procs, Ledger: g.ledger, Pairing: g.gate, Metrics: g.registry, Log: g.log, Actions: acts,
		Approvals: g.approvals, LoginThrottle: tokens, CodeThrottle: codes}
	if g.demoSecret != "" {
		g.demo.Register(mux)
		hook := &webhook.Handler{Plugins: g.runtime, Door: g.door, Log: g.log, Loading: g.pluginsLoading, Stopping: g.stopping.Load}
		inbox := &demo.Inbox{Hook: hook, Plugin: g.cfg.Demo.Plugin, Profile: g.cfg.Demo.Profile, Secret: g.demoSecret}
		inbox.Register(mux)
		g.demoChat(inbox)
	}
	g.console.Register(mux)
	guard := &httpguard.Admin{Token: token, Hosts: g.cfg.AdminHosts, Refusals: g.refusals, Throttle: tokens,
		Open: func(r *http.Request) bool { return adminapi.IsOpen(r) || demo.IsPluginPost(r) || console.Owns(r) }}
	return guard.Wrap(mux)
}

// isDemo reports the demo platform's plugin profile.
func (g *Gateway) isDemo(plugin, profile string) bool {
	return g.demoSecret != "" && plugin == g.cfg.Demo.Plugin && profile == g.cfg.Demo.Profile
}

// The console chats on the demo platform as user "me" in chat 42 (the README's curl examples use
// the same chat).
const demoChatID, demoUserID = "42", "me"

// demoChat connects the console's chat to the demo platform through inbox, the path
// /demo/inbox takes. The chat's session key uses the plugin's name as its platform (the echo
// plugin's platform is "echo"): the plugin may not be loaded yet.
func (g *Gateway) demoChat(inbox *demo.Inbox) {
	key, err := g.kernel.Key(abi.Source{Platform: inbox.Plugin, Profile: inbox.Profile, ChatType: abi.ChatDM,
		ChatID: demoChatID, UserID: demoUserID})
	if err != nil {
		g.log.Warn("console: no demo chat", "error", err)
		return
	}
	chat := &demo.Chat{ChatID: demoChatID, UserID: demoUserID, Hook: inbox}
	inbox.Chat = chat // what curl posts to /demo/inbox is in the console's chat too
	g.demo.Chat = chat
	g.console.Chat, g.console.ChatKey = chat, key
	g.console.ChatName = "chat " + demoChatID + " on " + inbox.Plugin + "/" + inbox.Profile
}
