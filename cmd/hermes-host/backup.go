package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/store"
)

func init() { extraCommands = append(extraCommands, backupCmd) }

// backupCmd is `hermes-host backup FILE`: a consistent copy of the SQLite store, taken beside a
// serving host (store.Backup).
func backupCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "backup FILE",
		Short: "Copy the SQLite store to a new FILE, consistently, while the host serves (PostgreSQL: use pg_dump)",
		Long: `Copy the SQLite store (<data_dir>/hermes.db) to FILE, a new file, with one consistent snapshot
of everything committed, while a host may be serving on it. FILE must not exist.

To restore: stop the host, remove <data_dir>/hermes.db-wal and hermes.db-shm if they are
there, copy FILE to <data_dir>/hermes.db, start the host.

A PostgreSQL store (store: postgres://...) is backed up with pg_dump instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.load()
			if err != nil {
				return err
			}
			if store.IsPostgres(cfg.Store) {
				return store.ErrBackupShared
			}
			src := filepath.Join(cfg.DataDir, "hermes.db")
			db, err := store.OpenBackupSource(cfg.DataDir) // creates nothing where there is no store
			if errors.Is(err, store.ErrNoDatabase) {
				return fmt.Errorf("no store at %s: nothing to back up (is --data-dir, or data_dir in the config, the host's?)", src)
			}
			if err != nil {
				return err
			}
			defer db.Close()
			file := args[0]
			if err := store.Backup(cmd.Context(), db, file); err != nil {
				return err
			}
			fi, err := os.Stat(file)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s (%d bytes)\nto restore: stop the host, remove %s-wal and %s-shm if present, copy %s to %s\n",
				src, file, fi.Size(), src, src, file, src)
			return nil
		},
	}
}
