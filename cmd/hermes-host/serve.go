package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/gateway"
)

func serveCmd(g *globals) *cobra.Command {
	var testClock string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: load plugins, serve webhooks and the admin API, run turns",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, log, err := g.load()
			if err != nil {
				return err
			}
			cfg.TestClock = testClock
			if err := os.MkdirAll(cfg.PluginsDir, 0o755); err != nil {
				return err
			}
			ctx := cmd.Context()
			gw, err := gateway.Open(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer gw.Close()
			return gw.Run(ctx, nil)
		},
	}
	// For end-to-end tests only: plugins (hermes_clock, scheduler ticks) see the time written in
	// this file (Unix milliseconds or RFC 3339), so a test can drive schedules without waiting.
	cmd.Flags().StringVar(&testClock, "test-clock", "", "tests only: read the plugins' clock from this file")
	cmd.Flags().MarkHidden("test-clock")
	return cmd
}
