// Package kv is the durable key/value store the host offers plugins: one namespace per plugin
// and profile, in the host's database (SQLite or PostgreSQL). A plugin keeps its cursors here
// (the Telegram update offset, a Slack reconnect URL), because plugin instances are disposable.
package kv

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Limits cap what one namespace may hold.
const (
	MaxKeyBytes   = 256
	MaxValueBytes = 1 << 20
	MaxKeys       = 10_000
)

var migrations = []string{
	`CREATE TABLE plugin_kv (
		plugin  TEXT NOT NULL,
		profile TEXT NOT NULL,
		key     TEXT NOT NULL,
		value   BLOB NOT NULL,
		updated_at INTEGER NOT NULL,
		PRIMARY KEY (plugin, profile, key)
	) WITHOUT ROWID`,
}

// Store is the plugin key/value store.
type Store struct {
	db *sql.DB
}

// Open prepares the store's table in db.
func Open(ctx context.Context, db *sql.DB) (*Store, error) {
	if err := store.Migrate(ctx, db, "kv", migrations); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// Get reads key in the (plugin, profile) namespace.
func (s *Store) Get(ctx context.Context, plugin, profile, key string) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	var v []byte
	err := s.db.QueryRowContext(ctx,
		`SELECT value FROM plugin_kv WHERE plugin = ? AND profile = ? AND key = ?`,
		plugin, profile, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, abi.Errorf(abi.CodeIO, "kv get: %v", err)
	}
	return v, true, nil
}

// Set writes key durably (the transaction is committed before Set returns).
func (s *Store) Set(ctx context.Context, plugin, profile, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(value) > MaxValueBytes {
		return abi.Errorf(abi.CodeTooLarge, "kv value of %d bytes exceeds %d", len(value), MaxValueBytes)
	}
	if value == nil {
		value = []byte{}
	}
	err := store.WithTx(ctx, s.db, func(tx *sql.Tx) error {
		var exists, n int
		if err := tx.QueryRowContext(ctx,
			`SELECT COUNT(*) FROM plugin_kv WHERE plugin = ? AND profile = ? AND key = ?`,
			plugin, profile, key).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			if err := tx.QueryRowContext(ctx,
				`SELECT COUNT(*) FROM plugin_kv WHERE plugin = ? AND profile = ?`,
				plugin, profile).Scan(&n); err != nil {
				return err
			}
			if n >= MaxKeys {
				return abi.Errorf(abi.CodeTooLarge, "kv namespace holds %d keys, the maximum", n)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO plugin_kv (plugin, profile, key, value, updated_at)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (plugin, profile, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			plugin, profile, key, value, time.Now().UnixMilli())
		return err
	})
	store.Report(s.db, store.PathKV, err)
	if err != nil {
		if abi.CodeOf(err) != "" {
			return err
		}
		return abi.Errorf(abi.CodeIO, "kv set: %v", err)
	}
	return nil
}

// Delete removes key; removing an absent key is not an error.
func (s *Store) Delete(ctx context.Context, plugin, profile, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, `DELETE FROM plugin_kv WHERE plugin = ? AND profile = ? AND key = ?`, plugin, profile, key)
	store.Report(s.db, store.PathKV, err)
	if err != nil {
		return abi.Errorf(abi.CodeIO, "kv delete: %v", err)
	}
	return nil
}

func checkKey(key string) error {
	if key == "" {
		return abi.Errorf(abi.CodeBadRequest, "kv key is empty")
	}
	if len(key) > MaxKeyBytes {
		return abi.Errorf(abi.CodeTooLarge, "kv key of %d bytes exceeds %d", len(key), MaxKeyBytes)
	}
	return nil
}
