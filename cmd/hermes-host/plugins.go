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
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/gateway"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

func pluginsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "plugins", Short: "List and inspect plugins"}
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "Validate every plugin in the plugins directory and list what loads",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.load()
			if err != nil {
				return err
			}
			ctx := context.Background()
			gw, err := gateway.Open(ctx, cfg, quietLogger())
			if err != nil {
				return err
			}
			defer gw.Close()
			rej := gw.Runtime().Scan(ctx)
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tVERSION\tKIND\tPLATFORM\tSTATE\tPROFILES\tFILE")
			for _, p := range gw.Runtime().Plugins() {
				info := p.Info()
				var profiles []string
				for name, problems := range info.Profiles {
					if len(problems) > 0 {
						name += "(disabled)"
					}
					profiles = append(profiles, name)
				}
				sort.Strings(profiles)
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", info.Name, info.Manifest.Version, info.Manifest.Kind,
					info.Manifest.Platform, info.State, strings.Join(profiles, ","), info.File)
			}
			w.Flush()
			for _, r := range rej {
				fmt.Fprintf(cmd.OutOrStdout(), "REJECTED %s: %s\n", r.Path, r.Error)
			}
			if len(gw.Runtime().Plugins()) == 0 && len(rej) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no plugins in %s\n", cfg.PluginsDir)
			}
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "inspect FILE.wasm",
		Short: "Validate one plugin file and print its manifest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := context.Background()
			rt, p, err := plugin.LoadFile(ctx, args[0], plugin.FileOptions{})
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: rejected: %v\n", args[0], err)
				return exitError{1}
			}
			defer rt.Close()
			info := p.Info()
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

// quietLogger logs only warnings and errors, for one-shot commands.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
