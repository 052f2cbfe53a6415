package kv

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// A kv write the store refuses (another connection holds SQLite's write lock) is reported to the
// store's write health under "kv", with SQLite's error; reads go on, and a write refused for its
// own sake (a value over the limit) is not the store refusing writes.
func TestRefusedWriteIsReported(t *testing.T) {
	ctx := context.Background()
	b := storetest.SQLite(t)
	db, err := store.Open(filepath.Join(b.Dir, "hermes.db"), store.Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Set(ctx, "cron", "main", "jobs", []byte("[]")))
	if err := s.Set(ctx, "cron", "main", "big", make([]byte, MaxValueBytes+1)); abi.CodeOf(err) != abi.CodeTooLarge {
		t.Fatalf("oversized value: %v", err)
	}
	h := store.HealthOf(db)
	if err := h.Err(); err != nil {
		t.Fatalf("an oversized value made the store failing: %v", err)
	}

	other := b.Open(t)
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, `ROLLBACK`)
	if err := s.Set(ctx, "cron", "main", "jobs", []byte(`[{"id":"a"}]`)); err == nil {
		t.Fatal("a write went through while another connection held the lock")
	}
	if err := s.Delete(ctx, "cron", "main", "jobs"); err == nil {
		t.Fatal("a delete went through while another connection held the lock")
	}
	f := h.Failing()
	if len(f) != 1 || f[0].Path != store.PathKV || f[0].Count != 2 || !strings.Contains(f[0].Error, "locked") {
		t.Fatalf("failing %+v", f)
	}
	if v, ok, err := s.Get(ctx, "cron", "main", "jobs"); err != nil || !ok || string(v) != "[]" {
		t.Fatalf("read while writes are refused: %q %v %v", v, ok, err)
	}
}
