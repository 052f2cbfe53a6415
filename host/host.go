// Package host is hermes-host as a Go library: the gateway that connects an agent to chat
// platforms through WebAssembly plugins, for a program that embeds it instead of running the
// hermes-host command (which is a thin layer over this package).
//
// A Host is opened from a Config (the YAML file hermes-host serve reads, or the same YAML in
// memory, with a few settings a program usually sets itself) and serves until its context ends:
//
//	h, err := host.Open(ctx, host.Config{File: "hermes.yaml"}, host.Options{})
//	if err != nil { ... }
//	defer h.Close()
//	err = h.Serve(ctx)
//
// Options.Agent replaces the configured agent with the program's own: anything that answers a
// Turn with a Reply. LoadPlugin loads one plugin file outside a serving host, into an Env of
// host functions (kv, deny-by-default egress, and the session, dispatch, send and agent
// services a program may answer itself): the conformance suite and sdk/sdktest run plugins this
// way, and Inspect validates a file as `hermes-host plugins inspect` does.
//
// Everything else the host is lives in the module's internal packages, which this package's
// API never names: what is here is the whole public surface.
package host

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/gateway"
	"github.com/hermes-host/hermes-host/internal/httpguard"
)

// Config is where a host's configuration comes from: the embedded defaults, the YAML document
// of File (or YAML) merged over them with ${NAME} expanded from the environment, then each
// setting below that is not empty. The keys are those of README.md's Configuration section.
type Config struct {
	// File is a YAML configuration file (what `hermes-host serve --config` reads); "": none.
	File string
	// YAML is a configuration document given in memory, used when File is empty.
	YAML []byte

	// DataDir is the data directory (database, admin token, compilation cache); a default
	// plugins directory (<data_dir>/plugins) follows it.
	DataDir string
	// PluginsDir is the directory of the .wasm plugins.
	PluginsDir string
	// CompilationCache is the directory of the plugins' compiled code (default
	// <data_dir>/cache/wazero); hosts and tests on one machine may share one.
	CompilationCache string
	// Listen is the public listener's address (webhooks); AdminListen the admin listener's
	// (health, metrics, the admin API, the console). Port 0 picks a free port (Options.Ready
	// tells which).
	Listen, AdminListen string
	// LogLevel is debug, info, warn or error.
	LogLevel string

	// TestClock is for tests only: a file holding the time plugins see (Unix milliseconds or
	// RFC 3339), so a test can move a running host through a day of schedules without waiting.
	TestClock string
}

// load resolves c into the host's configuration, validated.
func (c Config) load() (*config.Config, error) {
	var cfg *config.Config
	var err error
	switch {
	case c.File != "" && len(c.YAML) > 0:
		return nil, errors.New("host: Config has both File and YAML: give one")
	case c.File != "":
		cfg, err = config.Load(c.File)
	default:
		cfg, err = config.Parse("", c.YAML)
	}
	if err != nil {
		return nil, err
	}
	err = cfg.Override(config.Overrides{DataDir: c.DataDir, PluginsDir: c.PluginsDir, CompilationCache: c.CompilationCache,
		Listen: c.Listen, AdminListen: c.AdminListen, LogLevel: c.LogLevel})
	cfg.TestClock = c.TestClock
	return cfg, err
}

// Options are what a program gives a host beside its configuration.
type Options struct {
	// Logger receives the host's log; nil: text lines on standard error at the configuration's
	// log_level.
	Logger *slog.Logger
	// LogLevel, if not nil, is set by Open to the configuration's log_level: a Logger whose
	// handler takes its level from it logs what the configuration asks for.
	LogLevel *slog.LevelVar
	// Agent answers the host's turns instead of the agent the configuration names
	// (agent.kind); nil: that one.
	Agent Agent
	// Ready, if not nil, is called by Serve with the public and the admin listener's addresses
	// once both accept connections.
	Ready func(public, admin string)
}

// Host is an open hermes-host: its data directory, database and plugin runtime. Serve runs it;
// Close releases it.
type Host struct {
	gw    *gateway.Gateway
	cfg   *config.Config
	log   *slog.Logger
	ready func(public, admin string)
}

// Open prepares a host from cfg: it creates (or narrows to 0700) the data directory, opens the
// database and the plugin runtime, and builds the agent. Plugins are loaded by Serve (or by
// ScanPlugins). When Open fails, nothing it started keeps running.
func Open(ctx context.Context, cfg Config, opt Options) (*Host, error) {
	c, err := cfg.load()
	if err != nil {
		return nil, err
	}
	if opt.LogLevel != nil {
		opt.LogLevel.Set(c.Level())
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: c.Level()}))
	}
	var gopt gateway.Options
	if opt.Agent != nil {
		gopt.Agent = agentOf(opt.Agent)
	}
	gw, err := gateway.OpenWith(ctx, c, log, gopt)
	if err != nil {
		return nil, err
	}
	return &Host{gw: gw, cfg: c, log: log, ready: opt.Ready}, nil
}

// Serve runs the host until ctx ends: it opens the two listeners, recovers background processes
// and pending deliveries, loads the plugins (each serves as soon as it has loaded) and watches
// the plugins directory for changes. A plugins directory the configuration names must exist;
// the default one is created. When ctx ends Serve drains (for at most the configuration's
// shutdown_timeout): it stops taking events, lets the turns and deliveries in progress finish
// and leaves the rest to the next start (ARCHITECTURE.md, "Stopping"). Serve returns nil when
// ctx ended, else why the host could not serve; either way what it started has stopped.
func (h *Host) Serve(ctx context.Context) error {
	created, err := h.cfg.EnsurePluginsDir()
	if err != nil {
		return err
	}
	if created {
		h.log.Info("created the plugins directory; drop .wasm plugins into it", "dir", h.cfg.PluginsDir)
	}
	return h.gw.Run(ctx, h.ready)
}

// Close releases what Open acquired. Call it after Serve has returned.
func (h *Host) Close() { h.gw.Close() }

// AdminToken returns the admin listener's bearer token, kept in the data directory (created on
// first use): what the admin API, the demo platform and the console's login take.
func (h *Host) AdminToken() (string, error) {
	return httpguard.Secret(filepath.Join(h.cfg.DataDir, gateway.TokenFile))
}

// ScanPlugins loads every plugin file of the plugins directory once, running its describe and
// every profile's configure, without serving anything: what `hermes-host plugins ls` reports
// when no host is running. It returns what loaded and the files that were rejected, and why.
func (h *Host) ScanPlugins(ctx context.Context) ([]PluginInfo, []Rejection) {
	rt := h.gw.Runtime()
	rej := rt.Scan(ctx)
	var infos []PluginInfo
	for _, p := range rt.Plugins() {
		infos = append(infos, infoOf(p.Info()))
	}
	return infos, rejections(rej)
}
