package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
)

// The operator's actions: they need the serving host (its admin API), which applies the same
// checks as the console's buttons (internal/actions): a delivery is retried only if it certainly
// was not sent, a process is killed through its registry, a plugin is loaded again from its file.

// killCmd is `ps kill ID`.
func killCmd(g *globals) *cobra.Command {
	var asJSON bool
	kill := &cobra.Command{
		Use:   "kill ID",
		Short: "Stop a running background process (through the serving host; its conversation is told)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct{ Process process.Info }
			if err := g.act(cmd, "/api/processes/"+url.PathEscape(args[0])+"/kill", &out); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), out.Process)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "killed %s (%s): %s\n", out.Process.ID, out.Process.State, out.Process.Command)
			return err
		},
	}
	jsonFlag(kill, &asJSON)
	return kill
}

// retryCmd is `deliveries retry ID`.
func retryCmd(g *globals) *cobra.Command {
	var asJSON bool
	retry := &cobra.Command{
		Use:   "retry ID",
		Short: "Send a failed delivery again, if it certainly was not sent (through the serving host)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct{ Delivery delivery.Row }
			if err := g.act(cmd, "/api/deliveries/"+url.PathEscape(args[0])+"/retry", &out); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), out.Delivery)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s is %s again: it goes out through its lane (dropped as stale if its conversation was left)\n",
				out.Delivery.ID, out.Delivery.State)
			return err
		},
	}
	jsonFlag(retry, &asJSON)
	return retry
}

// reloadCmd is `plugins reload NAME`.
func reloadCmd(g *globals) *cobra.Command {
	var asJSON bool
	reload := &cobra.Command{
		Use:   "reload NAME",
		Short: "Load a plugin again from its file (a fresh version, its crash breaker closed; through the serving host)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct{ Plugin json.RawMessage }
			if err := g.act(cmd, "/api/plugins/"+url.PathEscape(args[0])+"/reload", &out); err != nil {
				return err
			}
			if asJSON {
				_, err := cmd.OutOrStdout().Write(append(out.Plugin, '\n'))
				return err
			}
			return writeReloaded(cmd.OutOrStdout(), args[0], out.Plugin)
		},
	}
	jsonFlag(reload, &asJSON)
	return reload
}

// act posts an action to the serving host's admin API and decodes its answer into out.
func (g *globals) act(cmd *cobra.Command, path string, out any) error {
	cfg, _, err := g.load()
	if err != nil {
		return err
	}
	return adminCall(cmd.Context(), cfg, path, struct{}{}, out, time.Minute)
}

func writeReloaded(w io.Writer, name string, raw json.RawMessage) error {
	var p struct {
		Manifest struct{ Version string } `json:"manifest"`
		SHA256   string                   `json:"sha256"`
	}
	json.Unmarshal(raw, &p)
	_, err := fmt.Fprintf(w, "reloaded %s %s (sha256 %.12s)\n", name, p.Manifest.Version, p.SHA256)
	return err
}
