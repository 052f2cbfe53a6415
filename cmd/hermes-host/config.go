package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/config"
)

// The config commands check a configuration without starting the host, and show the one in
// effect.

func init() { extraCommands = append(extraCommands, configCmd) }

func configCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check the configuration, or show the one in effect"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check [-c FILE]",
		Short: "Check the configuration (the file, with the flags given beside it) as serve would, without serving: exit 0, or every problem with its key path and exit 1",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := config.Check(g.configPath, g.overrides())
			var bad *config.Error
			if errors.As(err, &bad) {
				w := cmd.ErrOrStderr()
				fmt.Fprintf(w, "%s: %d problem(s):\n", source(g.configPath), len(bad.Problems))
				for _, p := range bad.Problems {
					fmt.Fprintf(w, "  %s\n", p)
				}
				return exitError{1}
			}
			if err != nil { // the file could not be read
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", source(g.configPath))
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "show [-c FILE]",
		Short: "Print the configuration in effect (the defaults, the file and the flags merged) as YAML, with secrets redacted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.load()
			var bad *config.Error
			if errors.As(err, &bad) {
				return fmt.Errorf("%w (`hermes-host config check` lists them one a line)", err)
			}
			if err != nil {
				return err
			}
			b, err := cfg.Redacted()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	})
	return cmd
}

// source names where the configuration comes from.
func source(path string) string {
	if path == "" {
		return "the embedded defaults (no --config, no HERMES_CONFIG)"
	}
	return path
}
