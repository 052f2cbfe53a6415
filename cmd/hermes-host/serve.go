package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/gateway"
)

func serveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: load plugins, serve webhooks and the admin API, run turns",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, log, err := g.load()
			if err != nil {
				return err
			}
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
}
