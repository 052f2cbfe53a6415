package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/host"
	"github.com/hermes-host/hermes-host/internal/config"
)

func pluginsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "plugins", Short: "List and inspect plugins"}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the plugins: the running server's view if one answers, else validate the directory here",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			w := cmd.OutOrStdout()
			if view, err := serverPlugins(ctx, cfg); err == nil {
				if asJSON {
					view.From = "http://" + cfg.AdminListen
					view.Plugins, view.Rejected = orEmpty(view.Plugins), orEmpty(view.Rejected)
					return writeJSON(w, view)
				}
				fmt.Fprintf(w, "from the server at %s\n", cfg.AdminListen)
				return writePlugins(w, view.Plugins, view.Rejected, cfg.PluginsDir)
			}
			view, err := g.scanHere(ctx, cfg, false)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(w, view)
			}
			fmt.Fprintf(w, "no server answering at %s; validated %s here\n", cfg.AdminListen, cfg.PluginsDir)
			return writePlugins(w, view.Plugins, view.Rejected, cfg.PluginsDir)
		},
	}
	jsonFlag(ls, &asJSON)
	cmd.AddCommand(ls, reloadCmd(g), compileCmd(g))
	cmd.AddCommand(&cobra.Command{
		Use:   "inspect FILE.wasm",
		Short: "Validate one plugin file and print its manifest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := host.Inspect(cmd.Context(), args[0])
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: rejected: %v\n", args[0], err)
				return exitError{1}
			}
			info.Profiles = nil
			return writeJSON(cmd.OutOrStdout(), info)
		},
	})
	return cmd
}

func conformanceCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "conformance FILE.wasm [--platform NAME] [--json]",
		Short: "Run the plugin contract suite against a plugin (exit status 1 on failure)",
		Long: `Runs hermes-conformance, the plugin contract suite, with the same arguments. It is a separate
binary (built beside hermes-host by make) so that the platform fakes it runs are not part of the
gateway. See hermes-conformance --help.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			bin, err := conformanceBinary()
			if err != nil {
				return err
			}
			c := exec.CommandContext(cmd.Context(), bin, args...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			err = c.Run()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return exitError{exit.ExitCode()}
			}
			return err
		},
	}
}

// conformanceBinary finds hermes-conformance next to this executable, else on PATH.
func conformanceBinary() (string, error) {
	const name = "hermes-conformance"
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s is not installed next to hermes-host or on PATH; build it with `make` or `go build ./cmd/%s`", name, name)
}

// pluginsView is the admin API's /api/plugins answer, and `plugins ls --json`.
type pluginsView struct {
	// From is where the view came from: the serving host's admin address, or "here" (the
	// plugins directory validated by this command).
	From     string            `json:"from,omitempty"`
	Plugins  []host.PluginInfo `json:"plugins"`
	Rejected []host.Rejection  `json:"rejected"`
}

// compileCmd fills the compilation cache from the plugins directory, so that the next serve
// loads every plugin from compiled code instead of compiling it (make runs it after building
// the plugins). The code is compiled exactly as serve compiles it, by loading the directory
// into a throwaway host that uses the configuration's cache, so the keys match.
func compileCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "compile",
		Short: "Compile the plugins directory into the compilation cache, so serve starts without compiling",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.load()
			if err != nil {
				return err
			}
			start := time.Now()
			view, err := g.scanHere(cmd.Context(), cfg, true)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, p := range view.Plugins {
				fmt.Fprintf(w, "compiled %s (%s)\n", p.Name, filepath.Base(p.File))
			}
			for _, r := range view.Rejected {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: rejected: %s\n", filepath.Base(r.Path), r.Error)
			}
			fmt.Fprintf(w, "%d plugins in %s, cache %s, %v\n", len(view.Plugins), cfg.PluginsDir, cacheDir(cfg),
				time.Since(start).Round(time.Millisecond))
			if len(view.Rejected) > 0 {
				return exitError{1}
			}
			return nil
		},
	}
}

// cacheDir is the configuration's compilation cache, or its default under the data directory.
func cacheDir(cfg *config.Config) string {
	if cfg.CompilationCache != "" {
		return cfg.CompilationCache
	}
	return filepath.Join(cfg.DataDir, "cache", "wazero")
}

// scanHere validates the plugins directory in this process, as a host would load it (describe
// and configure run here), without touching the data directory: the host it opens for that keeps
// its database in a temporary directory, and the compiled code there too unless the
// configuration's cache already exists (or fill is set: then the cache is created and filled).
// A plugins directory that is not there is an error here, not created.
func (g *globals) scanHere(ctx context.Context, cfg *config.Config, fill bool) (*pluginsView, error) {
	if fi, err := os.Stat(cfg.PluginsDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("no plugins directory at %s (plugins_dir, --plugins) and no host answering at %s", cfg.PluginsDir, cfg.AdminListen)
	}
	tmp, err := os.MkdirTemp("", "hermes-plugins-ls-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	hc := g.hostConfig()
	hc.DataDir, hc.PluginsDir = tmp, cfg.PluginsDir
	cache := cacheDir(cfg)
	if fill {
		if err := os.MkdirAll(cache, 0o700); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(cache); err == nil {
		hc.CompilationCache = cache
	}
	log := quietLogger()
	if g.logLevel != "" {
		var level slog.Level
		if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
			return nil, fmt.Errorf("--log-level %q: %v", g.logLevel, err)
		}
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	h, err := host.Open(ctx, hc, host.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	defer h.Close()
	infos, rej := h.ScanPlugins(ctx)
	return &pluginsView{From: "here", Plugins: orEmpty(infos), Rejected: orEmpty(rej)}, nil
}

// serverPlugins asks a running server for its plugins (GET /api/plugins on its admin listener).
func serverPlugins(ctx context.Context, cfg *config.Config) (*pluginsView, error) {
	var v pluginsView
	if err := adminCall(ctx, cfg, "/api/plugins", nil, &v, 2*time.Second); err != nil {
		return nil, err
	}
	return &v, nil
}

// quietLogger logs only warnings and errors, for one-shot commands.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
