package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
)

// ErrBackupShared is returned by Backup for a PostgreSQL database: the server's own tools copy
// it (pg_dump), consistently and without stopping the hosts.
var ErrBackupShared = errors.New("store: the store is PostgreSQL; back it up with pg_dump (for example pg_dump -Fc -f hermes.dump DBNAME), not with hermes-host backup")

// Backup writes a consistent copy of the SQLite database db to the new file path, while the
// database is in use: VACUUM INTO reads one snapshot of it (WAL: the host's writers go on
// meanwhile) and writes a compact database file that holds everything committed before the
// snapshot, the WAL's content included. path must not exist: Backup creates it, readable by its
// owner only as the database is, and never overwrites a file; on failure it removes what it
// created. The copy is a database file of its own, opened like the original.
func Backup(ctx context.Context, db *sql.DB, path string) error {
	if Shared(db) {
		return ErrBackupShared
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("store: backup: %s exists; a backup never overwrites a file (remove it, or name another)", path)
	}
	if err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	f.Close()
	// VACUUM INTO takes an empty file as a new one. It holds this process's write gate while it
	// copies: run it from a process of its own (hermes-host backup), not inside a serving host,
	// whose writers would wait meanwhile; another process's writers do not.
	if _, err := db.ExecContext(ctx, `VACUUM INTO $1`, path); err != nil {
		os.Remove(path)
		return fmt.Errorf("store: backup to %s: %w", path, err)
	}
	return nil
}
