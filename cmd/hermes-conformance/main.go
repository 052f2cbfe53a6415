// Command hermes-conformance runs the plugin contract suite against a plugin, and optionally a
// platform's behavioural profile against a loopback fake of that platform:
//
//	hermes-conformance FILE.wasm [--platform telegram|slack|discord|matrix|cron|yuanbao] [--config profile.json] [--webhook-sample update.json [--webhook-header "Name: value"]] [--json]
//
// It exits 0 when every check passes, 1 when one fails and 2 on a usage error. It is a binary
// of its own so that the platform fakes (loopback HTTP and WebSocket servers) are not linked into
// the gateway; `hermes-host conformance` runs it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/conformance"
	cronconf "github.com/hermes-host/hermes-host/conformance/cron"
	discordconf "github.com/hermes-host/hermes-host/conformance/discord"
	matrixconf "github.com/hermes-host/hermes-host/conformance/matrix"
	slackconf "github.com/hermes-host/hermes-host/conformance/slack"
	telegramconf "github.com/hermes-host/hermes-host/conformance/telegram"
	yuanbaoconf "github.com/hermes-host/hermes-host/conformance/yuanbao"
)

// profiles are the platform profiles, by the name --platform takes. Each runs its checks against
// the plugin file and returns their results.
var profiles = map[string]func(ctx context.Context, file string) []conformance.Result{
	"telegram": func(ctx context.Context, file string) []conformance.Result {
		return telegramconf.Run(ctx, file, telegramconf.Options{}).Results
	},
	// Schedulers: the cron job syntax, with an injected clock.
	"cron": func(ctx context.Context, file string) []conformance.Result {
		return cronconf.Run(ctx, file, cronconf.Options{}).Results
	},
	"slack": func(ctx context.Context, file string) []conformance.Result {
		return slackconf.Run(ctx, file, slackconf.Options{}).Results
	},
	// Matrix: /sync since tokens, transaction ids, m.mentions, encrypted rooms.
	"matrix": func(ctx context.Context, file string) []conformance.Result {
		return matrixconf.Run(ctx, file, matrixconf.Options{}).Results
	},
	"yuanbao": func(ctx context.Context, file string) []conformance.Result {
		return yuanbaoconf.Run(ctx, file, yuanbaoconf.Options{}).Results
	},
	"discord": func(ctx context.Context, file string) []conformance.Result {
		return discordconf.Run(ctx, file, discordconf.Options{}).Results
	},
}

func platforms() string {
	var names []string
	for name := range profiles {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	var asJSON bool
	var platform, configFile string
	var samples, sampleHeaders []string
	code := 0
	cmd := &cobra.Command{
		Use:   "hermes-conformance FILE.wasm",
		Short: "Run the plugin contract suite against a plugin (exit status 1 on failure)",
		Long: `Runs the contract checks every plugin must pass (load-time validation; every export answers
empty, malformed and oversized input with an error instead of trapping). With --platform, also runs
that platform's behavioural profile against a loopback fake of the platform (` + platforms() + `).`,
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			profile, ok := profiles[platform]
			if platform != "" && !ok {
				return fmt.Errorf("no conformance profile for platform %q (known: %s)", platform, platforms())
			}
			var opt conformance.Options
			if configFile != "" {
				b, err := os.ReadFile(configFile)
				if err != nil {
					return err
				}
				if !json.Valid(b) {
					return fmt.Errorf("%s is not JSON", configFile)
				}
				opt.Config = b
			}
			headers := map[string][]string{}
			for _, h := range sampleHeaders {
				name, value, ok := strings.Cut(h, ":")
				if !ok || strings.TrimSpace(name) == "" {
					return fmt.Errorf("--webhook-header %q: want \"Name: value\"", h)
				}
				name = http.CanonicalHeaderKey(strings.TrimSpace(name))
				headers[name] = append(headers[name], strings.TrimSpace(value))
			}
			for _, f := range samples {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				opt.WebhookSamples = append(opt.WebhookSamples, conformance.WebhookSample{Name: filepath.Base(f), Headers: headers, Body: b})
			}
			rep := conformance.Run(cmd.Context(), args[0], opt)
			if profile != nil {
				rep.Results = append(rep.Results, profile(cmd.Context(), args[0])...)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				enc.Encode(rep)
			} else {
				rep.Write(cmd.OutOrStdout())
			}
			if !rep.Passed() {
				code = 1
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&configFile, "config", "", "JSON file with the profile configuration the normal-path checks use (default {})")
	cmd.Flags().StringArrayVar(&samples, "webhook-sample", nil, "file with a webhook request body as the platform posts it (raw): the webhook must accept it with well-formed events (repeatable)")
	cmd.Flags().StringArrayVar(&sampleHeaders, "webhook-header", nil, `"Name: value" sent with every webhook sample (a signature, a secret token; repeatable)`)
	cmd.Flags().StringVar(&platform, "platform", "", "also run a platform profile: "+platforms())
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hermes-conformance:", err)
		return 2
	}
	return code
}
