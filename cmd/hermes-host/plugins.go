package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/conformance"
	telegramconf "github.com/hermes-host/hermes-host/conformance/telegram"
	"github.com/hermes-host/hermes-host/internal/gateway"
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
			rt, p, err := conformance.Load(ctx, args[0], conformance.Options{})
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
	var asJSON bool
	var platform string
	cmd := &cobra.Command{
		Use:   "conformance FILE.wasm",
		Short: "Run the plugin contract suite against a plugin (exit status 1 on failure)",
		Long: `Runs the contract checks every plugin must pass (load-time validation; every export answers
empty, malformed and oversized input with an error instead of trapping). With --platform, also runs
that platform's behavioural profile against a loopback fake of the platform (telegram).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep := conformance.Run(context.Background(), args[0], conformance.Options{})
			switch platform {
			case "":
			case "telegram":
				tg := telegramconf.Run(context.Background(), args[0], telegramconf.Options{})
				rep.Results = append(rep.Results, tg.Results...)
			default:
				return fmt.Errorf("no conformance profile for platform %q (known: telegram)", platform)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				enc.Encode(rep)
			} else {
				rep.Write(cmd.OutOrStdout())
			}
			if !rep.Passed() {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&platform, "platform", "", "also run a platform profile: telegram")
	return cmd
}

// quietLogger logs only warnings and errors, for one-shot commands.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
