package main

import (
	"context"
	"encoding/json"
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
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List the plugins: the running server's view if one answers, else validate the directory here",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if view, err := serverPlugins(ctx, cfg); err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "from the server at %s\n", cfg.AdminListen)
				return writePlugins(cmd.OutOrStdout(), view.Plugins, view.Rejected, cfg.PluginsDir)
			}
			// No server: load every file here (its describe and configure run in this process).
			h, err := host.Open(ctx, g.hostConfig(), host.Options{Logger: quietLogger()})
			if err != nil {
				return err
			}
			defer h.Close()
			infos, rej := h.ScanPlugins(ctx)
			fmt.Fprintf(cmd.OutOrStdout(), "no server answering at %s; validated %s here\n", cfg.AdminListen, cfg.PluginsDir)
			return writePlugins(cmd.OutOrStdout(), infos, rej, cfg.PluginsDir)
		},
	})
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
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(info)
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

// pluginsView is the admin API's /api/plugins answer.
type pluginsView struct {
	Plugins  []host.PluginInfo `json:"plugins"`
	Rejected []host.Rejection  `json:"rejected"`
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
