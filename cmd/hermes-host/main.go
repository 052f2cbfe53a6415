// Command hermes-host is the gateway that connects an agent to chat platforms through
// WebAssembly plugins.
//
//	hermes-host serve [--config FILE]        run the gateway
//	hermes-host config check|show            check the configuration, or show the one in effect
//	hermes-host plugins ls                   list the plugins directory and what loads
//	hermes-host plugins inspect FILE.wasm    validate one plugin and print its manifest
//	hermes-host conformance FILE.wasm        run the plugin contract suite
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/host"
	"github.com/hermes-host/hermes-host/internal/config"
)

func main() {
	// Ctrl-C (or SIGTERM) cancels the running command through cmd.Context(): serve drains. A
	// second one exits at once.
	ctx, stop := signalContext()
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		if _, reported := err.(exitError); !reported {
			fmt.Fprintln(os.Stderr, "Error:", err)
		}
		os.Exit(exitCode(err))
	}
}

// exitError carries a specific exit code (a failed conformance run exits 1 without an
// additional error message).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func exitCode(err error) int {
	if e, ok := err.(exitError); ok {
		return e.code
	}
	return 2
}

type globals struct {
	configPath string
	dataDir    string
	pluginsDir string
	listen     string
	admin      string
	cache      string
	logLevel   string
	logJSON    bool
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:          "hermes-host",
		Short:        "Gateway between an AI agent and chat platforms, with platform adapters as Wasm plugins",
		SilenceUsage: true,
		// main prints errors, except an exitError: the command already reported its outcome.
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&g.configPath, "config", "c", os.Getenv("HERMES_CONFIG"), "YAML config file merged over the embedded defaults (env HERMES_CONFIG)")
	pf.StringVar(&g.dataDir, "data-dir", "", "data directory (database, compilation cache); overrides the config")
	pf.StringVar(&g.pluginsDir, "plugins", "", "plugins directory; overrides the config")
	pf.StringVar(&g.cache, "compilation-cache", os.Getenv("HERMES_COMPILATION_CACHE"), "the plugins' compiled code (default <data_dir>/cache/wazero; env HERMES_COMPILATION_CACHE); overrides the config")
	pf.StringVar(&g.listen, "listen", "", "public listen address (webhooks); overrides the config")
	pf.StringVar(&g.admin, "admin-listen", "", "admin listen address (API, metrics, demo); overrides the config")
	pf.StringVar(&g.logLevel, "log-level", "", "debug, info, warn or error; overrides the config")
	pf.BoolVar(&g.logJSON, "log-json", false, "log as JSON lines")
	root.AddCommand(serveCmd(g), pluginsCmd(g), conformanceCmd(g))
	for _, c := range extraCommands {
		root.AddCommand(c(g))
	}
	return root
}

// extraCommands are added by other files of this package (config, sessions, ps, deliveries, cron,
// pairing, auth).
var extraCommands []func(*globals) *cobra.Command

// hostConfig is the host's configuration as the flags give it: the file, and the settings
// given beside it.
func (g *globals) hostConfig() host.Config {
	o := g.overrides()
	return host.Config{File: g.configPath, DataDir: o.DataDir, PluginsDir: o.PluginsDir, CompilationCache: o.CompilationCache,
		Listen: o.Listen, AdminListen: o.AdminListen, LogLevel: o.LogLevel}
}

// overrides are the settings the flags give beside the configuration file.
func (g *globals) overrides() config.Overrides {
	return config.Overrides{DataDir: g.dataDir, PluginsDir: g.pluginsDir, CompilationCache: g.cache, Listen: g.listen,
		AdminListen: g.admin, LogLevel: g.logLevel}
}

// logger is the command's logger (text, or JSON lines with --log-json, on standard error), the
// default logger from now on, at a level the configuration sets (host.Options.LogLevel, or load).
func (g *globals) logger() (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if g.logJSON {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	log := slog.New(h)
	slog.SetDefault(log)
	return log, level
}

// load reads the configuration and applies the command-line overrides, for the commands that
// read the data directory or call a serving host rather than open one.
func (g *globals) load() (*config.Config, *slog.Logger, error) {
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.Override(g.overrides()); err != nil {
		return nil, nil, err
	}
	log, level := g.logger()
	level.Set(cfg.Level())
	return cfg, log, nil
}

// signalContext is cancelled on SIGINT or SIGTERM; a second of either, while the command is
// still winding down (serve drains for up to shutdown_timeout), exits the process at once with
// 128 plus the signal's number, as a shell reports a process the signal killed. That is a crash
// as far as the data directory is concerned, which the host recovers from at its next start.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "hermes-host: %v again: exiting at once; the next start recovers what was in progress\n", sig)
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel()
	}
}
