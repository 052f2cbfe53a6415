package main

import (
	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/host"
)

// serveCmd is `hermes-host serve`: the public host package's Open and Serve, with the flags as
// its Config.
func serveCmd(g *globals) *cobra.Command {
	var testClock string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: load plugins, serve webhooks and the admin API, run turns",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := g.hostConfig()
			cfg.TestClock = testClock
			log, level := g.logger()
			ctx := cmd.Context()
			h, err := host.Open(ctx, cfg, host.Options{Logger: log, LogLevel: level})
			if err != nil {
				return err
			}
			defer h.Close()
			return h.Serve(ctx)
		},
	}
	// For end-to-end tests only: plugins (hermes_clock, scheduler ticks) see the time written in
	// this file (Unix milliseconds or RFC 3339), so a test can drive schedules without waiting.
	cmd.Flags().StringVar(&testClock, "test-clock", "", "tests only: read the plugins' clock from this file")
	cmd.Flags().MarkHidden("test-clock")
	return cmd
}
