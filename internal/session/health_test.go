package session

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// A session write the store refuses (another connection holds SQLite's write lock: the first
// message of a chat cannot create its session) is reported to the store's write health under
// "sessions", with SQLite's error; a lost compare-and-set is not the store refusing writes.
func TestRefusedSessionWriteIsReported(t *testing.T) {
	b := storetest.SQLite(t)
	e := newEnvOn(t, b, Options{})
	h := store.HealthOf(e.db)
	res, err := e.k.Resolve(e.ctx, dm("1"), ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A transition that lost its compare-and-set: ErrConflict, the row's problem.
	err = e.k.WithBoundary(e.ctx, res.Route.Key, func(b *Boundary) error {
		return b.tx(func(tx *sql.Tx) error {
			return mustAffect(tx.ExecContext(b.ctx, `UPDATE session_routes SET updated_at = 0 WHERE session_key = ? AND generation = -1`, b.key))
		})
	})
	if !errors.Is(err, ErrConflict) || h.Err() != nil {
		t.Fatalf("lost compare-and-set %v; health %v", err, h.Err())
	}

	other := b.Open(t)
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), `ROLLBACK`)
	if _, err := e.k.Resolve(e.ctx, dm("2"), ResolveOptions{}); err == nil {
		t.Fatal("a session was created while another connection held the lock")
	}
	f := h.Failing()
	if len(f) != 1 || f[0].Path != store.PathSessions || !strings.Contains(f[0].Error, "locked") {
		t.Fatalf("failing %+v", f)
	}
}
