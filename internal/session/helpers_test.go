package session

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// epoch is where the fake clock of a test bubble starts (inBubble).
var epoch = time.Date(2026, 11, 29, 8, 5, 12, 0, time.UTC)

// inBubble runs f in a testing/synctest bubble: time.Now is a fake clock starting at epoch, and
// time.Sleep advances it as soon as every goroutine of the bubble is blocked, so a test moves
// the kernel's clock (auto-reset) with time.Sleep and takes no wall time.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		f(t)
	})
}

type env struct {
	t       *testing.T
	ctx     context.Context
	backend storetest.Backend
	path    string // the SQLite database file; "" on PostgreSQL
	db      *sql.DB
	k       *Kernel
}

// newEnv opens a kernel on the test backend storetest.Default picks (SQLite, or PostgreSQL with
// HERMES_TEST_STORE=postgres).
func newEnv(t testing.TB, opt Options) *env {
	t.Helper()
	return newEnvOn(t, storetest.Default(t), opt)
}

// newEnvOn opens a kernel on backend b.
func newEnvOn(t testing.TB, b storetest.Backend, opt Options) *env {
	t.Helper()
	db := b.Open(t)
	e := &env{ctx: context.Background(), backend: b, db: db}
	if b.Source == "" {
		e.path = filepath.Join(b.Dir, "hermes.db")
	}
	var err error
	e.k, err = Open(e.ctx, db, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.k.Close() })
	if tt, ok := t.(*testing.T); ok {
		e.t = tt
	}
	return e
}

// envOpener opens a test kernel (newEnv, or one on a given backend).
type envOpener func(t testing.TB, opt Options) *env

// onBackends runs fn as a subtest on SQLite and on PostgreSQL (skipped without
// HERMES_TEST_POSTGRES). fn opens its kernels with the newEnv it is given, so a test written with
// the package's newEnv runs on both by taking it as a parameter; every kernel it opens gets a
// database of its own.
func onBackends(t *testing.T, fn func(t *testing.T, newEnv envOpener)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		fn(t, func(t testing.TB, opt Options) *env { return newEnvOn(t, storetest.SQLite(t), opt) })
	})
	t.Run("postgres", func(t *testing.T) {
		fn(t, func(t testing.TB, opt Options) *env { return newEnvOn(t, storetest.Postgres(t), opt) })
	})
}

// newSQLiteEnv opens a kernel on SQLite whatever the test backend (tests of SQLite's file).
func newSQLiteEnv(t testing.TB, opt Options) *env {
	t.Helper()
	return newEnvOn(t, storetest.SQLite(t), opt)
}

func dm(chat string) abi.Source {
	return abi.Source{Platform: "telegram", ChatType: abi.ChatDM, ChatID: chat, UserID: chat}
}

func (e *env) key(src abi.Source) string {
	e.t.Helper()
	k, err := e.k.Key(src)
	if err != nil {
		e.t.Fatal(err)
	}
	return k
}

func (e *env) resolve(src abi.Source) Resolution {
	e.t.Helper()
	r, err := e.k.Resolve(e.ctx, src, ResolveOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// stamp spawns "work" in the current session of src, as the process registry would.
func (e *env) stamp(src abi.Source) Stamp {
	e.t.Helper()
	var s Stamp
	err := e.k.WithBoundary(e.ctx, e.key(src), func(b *Boundary) error {
		if _, err := b.Resolve(src, ResolveOptions{}); err != nil {
			return err
		}
		var err error
		s, err = b.Stamp(src)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// classify returns the authoritative verdict (inside the boundary).
func (e *env) classify(s Stamp) Verdict {
	e.t.Helper()
	var v Verdict
	if err := e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error { v = b.Classify(s); return nil }); err != nil {
		e.t.Fatal(err)
	}
	return v
}

// deliver is the check-and-send: classify inside the boundary and, if deliverable, append.
func (e *env) deliver(s Stamp, text string) Verdict {
	e.t.Helper()
	var v Verdict
	err := e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error {
		v = b.Classify(s)
		if !v.Deliverable() {
			return nil
		}
		_, err := b.Append(v.SessionID, Message{Role: "notification", Text: text})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) transcript(id string) []Message {
	e.t.Helper()
	m, err := e.k.Transcript(e.ctx, id, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) session(id string) SessionInfo {
	e.t.Helper()
	s, err := e.k.Session(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) current(key string) Route {
	e.t.Helper()
	var r Route
	err := e.k.WithBoundary(e.ctx, key, func(b *Boundary) error {
		var ok bool
		var err error
		r, ok, err = b.Current()
		if err == nil && !ok {
			e.t.Fatalf("no route for %s", key)
		}
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(q, args...); err != nil {
		e.t.Fatal(err)
	}
}

// r unwraps a transition's result.
func (e *env) r(r Route, err error) Route {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// waitFor spins until cond holds (a goroutine parked on a lock or a flight). It is a liveness
// wait, not a timing assertion: the deadline only turns a hang into a failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}
