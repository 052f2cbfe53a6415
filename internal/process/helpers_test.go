package process

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/fakeclock"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// long is the timeout for anything that waits on real processes: generous, because a loaded
// 2-core CI machine under -race can be slow. Tests never assert on durations.
const long = 60 * time.Second

// newFakeClock returns a manual clock for the registry's Options.Now. These tests wait on real
// OS processes, so they cannot use testing/synctest's clock.
func newFakeClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

type env struct {
	t    *testing.T
	b    storetest.Backend
	dir  string
	db   *sql.DB
	r    *Registry
	opts Options
}

// newEnv opens a fresh database (on the tests' default backend) and registry in a temporary
// directory. Every process the registry knows is SIGKILLed (by group) at cleanup.
func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	return newEnvOn(t, storetest.Default(t), opts)
}

// newEnvOn is newEnv on backend b.
func newEnvOn(t *testing.T, b storetest.Backend, opts Options) *env {
	t.Helper()
	return newEnvDB(t, b, b.Open(t), opts)
}

// newEnvStore is newEnv on SQLite with the store's options (a short busy timeout, for the
// failure tests, which hold SQLite's write lock).
func newEnvStore(t *testing.T, opts Options, so store.Options) *env {
	t.Helper()
	b := storetest.SQLite(t)
	db, err := store.Open(filepath.Join(b.Dir, "hermes.db"), so)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvDB(t, b, db, opts)
}

func newEnvDB(t *testing.T, b storetest.Backend, db *sql.DB, opts Options) *env {
	t.Helper()
	dir := b.Dir
	if opts.PollInterval == 0 {
		opts.PollInterval = 20 * time.Millisecond
	}
	if opts.KillGrace == 0 {
		opts.KillGrace = 2 * time.Second
	}
	opts.DataDir = dir
	e := &env{t: t, b: b, dir: dir, db: db, opts: opts}
	e.r = e.open()
	t.Cleanup(func() {
		e.killAll()
		e.r.Close()
		db.Close()
	})
	return e
}

func (e *env) open() *Registry {
	e.t.Helper()
	r, err := New(context.Background(), e.db, e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// reopen simulates a host restart in-process: the registry is closed (its processes keep
// running) and a new one recovers them.
func (e *env) reopen() RecoverReport {
	e.t.Helper()
	e.r.Close()
	e.r = e.open()
	rep, err := e.r.Recover(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

func (e *env) killAll() {
	rows, err := e.db.Query(`SELECT pid FROM processes WHERE pid > 0`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

func (e *env) spawn(req SpawnRequest) SpawnResult {
	e.t.Helper()
	if req.Stamp.SessionID == "" {
		req.Stamp = testStamp("S1")
	}
	res, err := e.r.Spawn(context.Background(), req)
	if err != nil {
		e.t.Fatalf("spawn %q: %v", req.Command, err)
	}
	return res
}

// waitEnd waits for a process to end without consuming its result (Poll).
func (e *env) waitEnd(id string) Status {
	e.t.Helper()
	var st Status
	waitFor(e.t, "end of "+id, func() bool {
		var err error
		st, err = e.r.Poll(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		return st.State.Final()
	})
	if p := e.r.lookup(id); p != nil {
		<-p.done // the end is committed
	}
	return st
}

func (e *env) events(id string) []Record {
	e.t.Helper()
	recs, err := e.r.Queue().Events(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// completions returns the completion records of id.
func (e *env) completions(id string) []Record {
	var out []Record
	for _, r := range e.events(id) {
		if r.Kind == EventCompletion {
			out = append(out, r)
		}
	}
	return out
}

func (e *env) row(id string) Info {
	e.t.Helper()
	in, err := loadRow(context.Background(), e.db, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

// gate returns a path a command can wait on and a function that opens it.
func (e *env) gate(name string) (string, func()) {
	p := filepath.Join(e.dir, "gate-"+name)
	return p, func() {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
}

func waitGate(path string) string {
	return `while [ ! -e '` + path + `' ]; do sleep 0.05; done; `
}

func testStamp(sid string) session.Stamp {
	return session.Stamp{
		Key: "agent:main:telegram:dm:42", SessionID: sid, Profile: "main", Generation: 3,
		Route: abi.Source{Platform: "telegram", Profile: "main", ChatType: abi.ChatDM, ChatID: "42", ThreadID: "7", UserID: "u42"},
	}
}

// waitFor polls cond until it holds, failing after the generous timeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(long)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// openSecond opens the test database through a second pool, as a separate process would.
func (e *env) openSecond() *sql.DB {
	e.t.Helper()
	return e.b.Open(e.t)
}

// flush waits until every op submitted so far is committed (the writer is FIFO).
func (e *env) flush() {
	if err := e.r.w.submit(&op{}).wait(); err != nil {
		e.t.Fatal(err)
	}
}
