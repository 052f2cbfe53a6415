package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// The inspection commands read the database directly, so they work beside a serving host.

func init() {
	extraCommands = append(extraCommands, sessionsCmd, psCmd, deliveriesCmd)
}

func (g *globals) openDB() (*sql.DB, string, error) {
	cfg, _, err := g.load()
	if err != nil {
		return nil, "", err
	}
	if cfg.Store == "" {
		// Reading must not create an empty database where the host keeps none.
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "hermes.db")); err != nil {
			return nil, "", err
		}
	}
	db, err := store.OpenSource(context.Background(), cfg.Store, cfg.DataDir, store.Options{MaxConns: 4})
	return db, cfg.DataDir, err
}

func sessionsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "sessions", Short: "Inspect session keys and physical sessions"}
	var prefix string
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List session keys with their current session and generation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, closeFn, err := g.kernel()
			if err != nil {
				return err
			}
			defer closeFn()
			keys, err := k.List(cmd.Context(), prefix)
			if err != nil {
				return err
			}
			return writeSessions(cmd.OutOrStdout(), keys)
		},
	}
	ls.Flags().StringVar(&prefix, "key", "", "only keys starting with this prefix")
	var tail int
	show := &cobra.Command{
		Use:   "show KEY|ID",
		Short: "Show a key's current session, its ancestors and compression continuations, and the transcript tail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, closeFn, err := g.kernel()
			if err != nil {
				return err
			}
			defer closeFn()
			v, err := k.Show(cmd.Context(), args[0], tail)
			if err != nil {
				return err
			}
			return writeSession(cmd.OutOrStdout(), v)
		},
	}
	show.Flags().IntVar(&tail, "tail", 10, "transcript messages to show")
	cmd.AddCommand(ls, show)
	return cmd
}

func (g *globals) kernel() (*session.Kernel, func(), error) {
	db, _, err := g.openDB()
	if err != nil {
		return nil, nil, err
	}
	k, err := session.Open(context.Background(), db, session.Options{CacheSize: -1})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return k, func() { k.Close(); db.Close() }, nil
}

func psCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List background processes with their session key, spawning session, state and age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			db, dataDir, err := g.openDB()
			if err != nil {
				return err
			}
			defer db.Close()
			list, err := process.ListProcesses(cmd.Context(), db, dataDir)
			if err != nil {
				return err
			}
			return writeProcesses(cmd.OutOrStdout(), list, time.Now())
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "log ID",
		Short: "Print a background process's output (also after its notification was dropped)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, dataDir, err := g.openDB()
			if err != nil {
				return err
			}
			defer db.Close()
			return copyLog(cmd.Context(), cmd.OutOrStdout(), db, dataDir, args[0])
		},
	})
	return cmd
}

func deliveriesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "deliveries", Short: "Inspect the delivery ledger"}
	var dropped bool
	var key, state string
	var limit int
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List outbound messages, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			db, _, err := g.openDB()
			if err != nil {
				return err
			}
			defer db.Close()
			if dropped {
				state = string(delivery.Dropped)
			}
			rows, err := delivery.List(cmd.Context(), db, delivery.Filter{State: delivery.State(state), KeyPrefix: key, Limit: limit})
			if err != nil {
				return err
			}
			return writeDeliveries(cmd.OutOrStdout(), rows, time.Now())
		},
	}
	ls.Flags().BoolVar(&dropped, "dropped", false, "only dropped messages (stale notifications and the like)")
	ls.Flags().StringVar(&state, "state", "", "only this state: pending, sending, delivered, failed, dropped")
	ls.Flags().StringVar(&key, "key", "", "only session keys starting with this prefix")
	ls.Flags().IntVar(&limit, "limit", 50, "at most this many")
	cmd.AddCommand(ls)
	return cmd
}
