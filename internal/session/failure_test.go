package session

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// snapshot is the whole committed state: every route, every session row's end state and the
// number of messages.
func snapshot(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	rows, err := db.Query(`SELECT session_key, session_id, generation, suspended FROM session_routes ORDER BY session_key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, s string
		var g, sus int64
		rows.Scan(&k, &s, &g, &sus)
		fmt.Fprintf(&b, "route %s -> %s gen %d suspended %d\n", k, s, g, sus)
	}
	rows.Close()
	rows, err = db.Query(`SELECT id, COALESCE(ended_at, -1), COALESCE(end_reason, '-') FROM sessions ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, r string
		var end int64
		rows.Scan(&id, &end, &r)
		fmt.Fprintf(&b, "session %s ended %d %s\n", id, end, r)
	}
	rows.Close()
	var n int
	db.QueryRow(`SELECT COUNT(*) FROM session_messages`).Scan(&n)
	fmt.Fprintf(&b, "messages %d", n)
	return b.String()
}

// A failure injected inside a transition's transaction (a failing statement, as a full disk or
// an I/O error would give) rolls it back completely: the routing table, the rows and the
// transcripts are as committed before it, the cache agrees with the store, and the kernel
// keeps working.
func TestFailureMidTransactionRollsBack(t *testing.T) {
	injected := errors.New("injected: disk I/O error")
	ops := []struct {
		name, stage string
		run         func(e *env, s Stamp) error
	}{
		{"reset", "replace:ended", func(e *env, s Stamp) error { _, err := e.k.Reset(e.ctx, s.Key, ""); return err }},
		{"compress", "replace:inserted", func(e *env, s Stamp) error { _, err := e.k.Compress(e.ctx, s.Key, s.SessionID, "sum"); return err }},
		{"suspended replacement", "replace:inserted", func(e *env, s Stamp) error {
			e.r(e.k.Suspend(e.ctx, s.Key))
			_, err := e.k.Resolve(e.ctx, dm("f"), ResolveOptions{})
			return err
		}},
		{"branch", "branch:copied", func(e *env, s Stamp) error { _, err := e.k.Branch(e.ctx, s.Key, "b"); return err }},
		{"resume", "resume:ended", func(e *env, s Stamp) error {
			e.r(e.k.Reset(e.ctx, s.Key, ""))
			_, err := e.k.Resume(e.ctx, s.Key, s.SessionID)
			return err
		}},
		{"reopen", "resolve:before-route", func(e *env, s Stamp) error {
			if err := e.k.EndSession(e.ctx, s.SessionID, EndAgentClose); err != nil {
				return err
			}
			_, err := e.k.Resolve(e.ctx, dm("f"), ResolveOptions{})
			return err
		}},
		{"create", "create:before-route", func(e *env, s Stamp) error { _, err := e.k.Resolve(e.ctx, dm("fresh"), ResolveOptions{}); return err }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			e := newSQLiteEnv(t, Options{})
			e.t = t
			s := e.stamp(dm("f"))
			e.exec(`INSERT INTO session_messages (session_id, role, text, created_at) VALUES ($1, 'user', 'hi', 0)`, s.SessionID)
			var committed string
			fired := false
			e.k.failpoint = func(stage string) error {
				if stage != op.stage || fired {
					return nil
				}
				fired = true
				// Inside the failing transaction: another connection sees what is committed.
				committed = snapshot(t, mustOpen(t, e.path))
				return injected
			}
			if err := op.run(e, s); !errors.Is(err, injected) {
				t.Fatalf("operation returned %v, want the injected error", err)
			}
			if got := snapshot(t, e.db); got != committed {
				t.Fatalf("a failed transaction changed the state:\nbefore\n%s\nafter\n%s", committed, got)
			}
			warm := e.classify(s)
			e.k.cache.drop(s.Key)
			cold := e.classify(s)
			if warm.Kind != cold.Kind || warm.SessionID != cold.SessionID || warm.Generation != cold.Generation {
				t.Fatalf("cache disagrees with the store: warm %v, cold %v", warm, cold)
			}
			e.k.failpoint = nil
			if _, err := e.k.Resolve(e.ctx, dm("f"), ResolveOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.k.Reset(e.ctx, s.Key, ""); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mustOpen(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Another connection holds the write lock: transitions fail after the (short) busy timeout
// and leave the routing table as it was; a classification that needs to write (healing a route
// left on a compressed parent) is unverifiable, never a delivery; after the lock is released
// everything proceeds.
func TestFailureBusyWriter(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/h.db"
	db, err := store.Open(path, store.Options{BusyTimeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := &env{t: t, ctx: context.Background(), path: path, db: db}
	e.k, err = Open(e.ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.k.Close()
	src := dm("busy")
	s := e.stamp(src)
	tip := e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
	e.exec(`UPDATE session_routes SET session_id = $1 WHERE session_key = $2`, s.SessionID, s.Key)
	e.k.cache.drop(s.Key)

	other := mustOpen(t, path)
	tx, err := other.BeginTx(e.ctx, nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE sessions SET title = 'held' WHERE id = $1`, tip.SessionID); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, other)

	for name, op := range map[string]func() error{
		"reset":    func() error { _, err := e.k.Reset(e.ctx, s.Key, ""); return err },
		"stop":     func() error { _, err := e.k.Stop(e.ctx, s.Key); return err },
		"branch":   func() error { _, err := e.k.Branch(e.ctx, s.Key, ""); return err },
		"create":   func() error { _, err := e.k.Resolve(e.ctx, dm("new"), ResolveOptions{}); return err },
		"resolve":  func() error { _, err := e.k.Resolve(e.ctx, src, ResolveOptions{}); return err },
		"compress": func() error { _, err := e.k.Compress(e.ctx, s.Key, tip.SessionID, ""); return err },
	} {
		if err := op(); err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") {
			t.Fatalf("%s under a held write lock: %v", name, err)
		}
	}
	if v := e.classify(s); v.Kind != Unverifiable || v.Reason != ReasonStore {
		t.Fatalf("classification needing a heal under busy: %v", v)
	}
	if after := snapshot(t, other); after != before {
		t.Fatalf("routing changed:\n%s\n---\n%s", before, after)
	}
	tx.Rollback()
	if v := e.classify(s); v.Kind != DeliverContinuation || v.SessionID != tip.SessionID {
		t.Fatalf("after release: %v", v)
	}
	if cur := e.current(s.Key); cur.SessionID != tip.SessionID || cur.Generation != tip.Generation {
		t.Fatalf("route %+v, want %+v", cur, tip)
	}
}

// The DB is closed while a boundary is held and a transition is under way: the transition
// fails, classification is unverifiable, and reopening shows the routing table unchanged.
func TestFailureClosedDB(t *testing.T) {
	e := newSQLiteEnv(t, Options{})
	e.t = t
	s := e.stamp(dm("closed"))
	before := snapshot(t, e.db)
	err := e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error {
		e.k.Close()
		e.db.Close()
		if _, err := b.Reset(""); err == nil {
			t.Error("reset on a closed DB succeeded")
		}
		if v := b.Classify(s); v.Kind != Unverifiable {
			t.Errorf("classification on a closed DB after a failed transition: %v", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, mustOpen(t, e.path)); got != before {
		t.Fatalf("routing changed:\n%s\n---\n%s", before, got)
	}
}

// The context is cancelled between two statements of a transition: it rolls back.
func TestFailureCancelledMidTransaction(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	s := e.stamp(dm("cancel"))
	before := snapshot(t, e.db)
	ctx, cancel := context.WithCancel(e.ctx)
	e.k.failpoint = func(stage string) error {
		if stage == "replace:ended" {
			cancel()
		}
		return nil
	}
	if _, err := e.k.Reset(ctx, s.Key, ""); err == nil {
		t.Fatal("reset with a cancelled context succeeded")
	}
	e.k.failpoint = nil
	if got := snapshot(t, e.db); got != before {
		t.Fatalf("routing changed:\n%s\n---\n%s", before, got)
	}
	if v := e.classify(s); v.Kind != Deliver || v.SessionID != s.SessionID {
		t.Fatalf("verdict %v", v)
	}
}
