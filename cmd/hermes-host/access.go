package main

import (
	"context"
	"database/sql"
	"errors"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/store"
)

// The access commands: DM pairing and the auth log. Approving and revoking go through the
// serving host's admin API when one runs (it tells an approved user in their chat), and to the
// database directly otherwise; listing reads the database.

func init() {
	extraCommands = append(extraCommands, pairingCmd, authCmd)
}

func pairingCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "pairing", Short: "DM pairing: list, approve and revoke users who asked for access"}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List open pairing codes and approved users",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			db, _, err := g.openDB(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			pending, approved, err := auth.ListPairing(cmd.Context(), db, time.Now())
			if err != nil {
				return err
			}
			if asJSON { // the admin API's /api/pairing
				return writeJSON(cmd.OutOrStdout(), map[string]any{"pending": orEmpty(pending), "approved": orEmpty(approved)})
			}
			return writePairing(cmd.OutOrStdout(), pending, approved, time.Now())
		},
	}
	jsonFlag(ls, &asJSON)
	cmd.AddCommand(ls)
	cmd.AddCommand(&cobra.Command{
		Use:   "approve CODE",
		Short: "Approve a pairing code: its user may talk to the agent from now on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct{ Approved auth.Approval }
			told, err := g.adminOrDB(cmd.Context(), "/api/pairing/approve", map[string]string{"code": args[0]}, &out,
				func(db *sql.DB) error {
					a, err := auth.ApproveCode(cmd.Context(), db, args[0], time.Now())
					out.Approved = a
					return err
				})
			if err == nil && out.Approved.Tools == nil {
				// Approved in the database directly: the grants are the configuration's.
				cfg, _, cerr := g.load()
				if cerr != nil {
					return cerr
				}
				out.Approved.Tools = cfg.Plugins[out.Approved.Plugin].Access[out.Approved.Profile].Tools
			}
			if err != nil {
				return err
			}
			return writeApproved(cmd.OutOrStdout(), out.Approved, told)
		},
	})
	var plugin, profile string
	revoke := &cobra.Command{
		Use:   "revoke USER",
		Short: "Revoke a user's approval (every plugin and profile, unless narrowed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct{ Revoked []auth.Approval }
			_, err := g.adminOrDB(cmd.Context(), "/api/pairing/revoke", map[string]string{"user": args[0], "plugin": plugin, "profile": profile}, &out,
				func(db *sql.DB) error {
					var err error
					out.Revoked, err = auth.RevokeUser(cmd.Context(), db, args[0], plugin, profile, time.Now())
					return err
				})
			if err != nil {
				return err
			}
			return writeRevoked(cmd.OutOrStdout(), out.Revoked)
		},
	}
	revoke.Flags().StringVar(&plugin, "plugin", "", "only this plugin's approval")
	revoke.Flags().StringVar(&profile, "profile", "", "only this profile's approval")
	cmd.AddCommand(revoke)
	return cmd
}

func authCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "auth", Short: "Inspect authorization decisions"}
	var plugin string
	var limit int
	var asJSON bool
	log := &cobra.Command{
		Use:   "log",
		Short: "List refused inbound events and the operator's approvals and revocations, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			db, _, err := g.openDB(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			entries, err := auth.ListLog(cmd.Context(), db, auth.LogFilter{Plugin: plugin, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), orEmpty(entries))
			}
			return writeAuthLog(cmd.OutOrStdout(), entries, time.Now())
		},
	}
	jsonFlag(log, &asJSON)
	log.Flags().StringVar(&plugin, "plugin", "", "only this plugin's events")
	log.Flags().IntVar(&limit, "limit", 50, "at most this many")
	cmd.AddCommand(log)
	return cmd
}

// adminOrDB runs an operator action through the serving host's admin API (POST path with body,
// answer decoded into out) and reports true; when no host answers on admin_listen it runs direct
// on the database instead and reports false.
func (g *globals) adminOrDB(ctx context.Context, path string, body any, out any, direct func(*sql.DB) error) (bool, error) {
	cfg, _, err := g.load()
	if err != nil {
		return false, err
	}
	err = adminCall(ctx, cfg, path, body, out, 3*time.Minute)
	if !errors.Is(err, errNoToken) && !errors.Is(err, syscall.ECONNREFUSED) {
		return err == nil, err
	}
	return false, g.withAuthDB(ctx, direct)
}

// withAuthDB runs fn on the database, opened to write, with the auth tables in place: an
// approval or revocation made while no host serves. A database must be there already (a host ran
// with this data directory); none is created.
func (g *globals) withAuthDB(ctx context.Context, fn func(*sql.DB) error) error {
	r, _, err := g.openDB(ctx)
	if err != nil {
		return err
	}
	r.Close()
	cfg, _, err := g.load()
	if err != nil {
		return err
	}
	db, err := store.OpenSource(ctx, cfg.Store, cfg.DataDir, store.Options{MaxConns: 4})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := auth.Migrate(ctx, db); err != nil {
		return err
	}
	return fn(db)
}
