package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// lockStore makes the store refuse writes the way another writer (a second host, a backup, a
// stuck transaction) does: a separate connection holds SQLite's write lock until release is
// called. Reads keep working (WAL), as with a full disk.
func lockStore(t *testing.T, dir string) (release func()) {
	t.Helper()
	db, err := store.Open(filepath.Join(dir, "hermes.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		conn.ExecContext(context.Background(), `ROLLBACK`)
		conn.Close()
		db.Close()
	}
	t.Cleanup(release)
	return release
}

// TestEndRetriedUntilTheStoreReturns: a process ends while the store refuses writes. The end
// checkpoint (with its completion) is retried until the store takes it, Health says what is
// wrong meanwhile, writes that need not land fail at once instead of waiting, and once the
// store is back the completion is queued exactly once, without a restart.
func TestEndRetriedUntilTheStoreReturns(t *testing.T) {
	e := newEnvStore(t, Options{StoreRetry: 20 * time.Millisecond, StoreRetryMax: 100 * time.Millisecond},
		store.Options{BusyTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	res := e.spawn(SpawnRequest{Command: "sleep 0.2; echo survived-the-outage", NotifyOnComplete: true})
	release := lockStore(t, e.dir)
	waitFor(t, "the registry to report the failing store", func() bool { return e.r.Health() != nil })
	if err := e.r.Health(); !strings.Contains(err.Error(), "process checkpoints failing since") ||
		!strings.Contains(err.Error(), "locked") {
		t.Fatalf("Health() = %v", err)
	}
	// The agent's poll knows the process ended; the checkpoint does not yet.
	if st, err := e.r.Poll(ctx, res.ID); err != nil || !st.State.Final() {
		t.Fatalf("poll %+v %v", st, err)
	}
	if len(e.completions(res.ID)) != 0 {
		t.Fatal("a completion was written while the store refused writes")
	}
	// A spawn needs its checkpoint and cannot wait for the store: it fails at once, saying why.
	if _, err := e.r.Spawn(ctx, SpawnRequest{Command: "true", Stamp: testStamp("S1")}); !errors.Is(err, ErrStoreFailing) {
		t.Fatalf("spawn while the store fails: %v", err)
	}
	release()
	waitFor(t, "the completion after the store came back", func() bool { return len(e.completions(res.ID)) == 1 })
	waitFor(t, "health to recover", func() bool { return e.r.Health() == nil })
	c := e.completions(res.ID)
	if len(c) != 1 || c[0].QueueState != qPending || !strings.Contains(c[0].Output, "survived-the-outage") {
		t.Fatalf("completions %+v", c)
	}
	in, err := loadRow(ctx, e.db, res.ID)
	if err != nil || in.State != StateExited || in.ExitCode == nil || *in.ExitCode != 0 {
		t.Fatalf("checkpoint %+v %v", in, err)
	}
	// And the registry serves on.
	e.spawn(SpawnRequest{Command: "true"})
}

// TestCloseWhileTheStoreFails: the host stops while an end waits for the store. Nothing is
// lost: the end was never written, so the next host's Recover finds the process ended (its exit
// file) and queues the completion once.
func TestCloseWhileTheStoreFails(t *testing.T) {
	e := newEnvStore(t, Options{StoreRetry: 20 * time.Millisecond, StoreRetryMax: 100 * time.Millisecond},
		store.Options{BusyTimeout: 100 * time.Millisecond})
	res := e.spawn(SpawnRequest{Command: "sleep 0.2; echo ended-while-closing", NotifyOnComplete: true})
	release := lockStore(t, e.dir)
	waitFor(t, "the failing store", func() bool { return e.r.Health() != nil })
	e.r.Close()
	release()
	rep := e.reopen()
	if rep.Exited != 1 {
		t.Fatalf("recover %+v", rep)
	}
	c := e.completions(res.ID)
	if len(c) != 1 || !strings.Contains(c[0].Output, "ended-while-closing") {
		t.Fatalf("completions %+v", c)
	}
}

// TestCorruptCheckpointIsReported: a checkpoint whose stamp cannot be decoded is an error, never
// an unstamped process (which would be delivered by route): Recover leaves it untouched and says
// so, and the host starts.
func TestCorruptCheckpointIsReported(t *testing.T) {
	e := newEnv(t, Options{})
	res := e.spawn(SpawnRequest{Command: "sleep 30", NotifyOnComplete: true})
	if _, err := e.db.Exec(`UPDATE processes SET stamp = '{not json' WHERE id = ?`, res.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := loadRow(context.Background(), e.db, res.ID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("loadRow = %v", err)
	}
	rep := e.reopen()
	if len(rep.Corrupt) != 1 || rep.Corrupt[0] != res.ID || len(rep.Adopted) != 0 {
		t.Fatalf("recover %+v", rep)
	}
	if len(e.completions(res.ID)) != 0 {
		t.Fatal("a completion was produced for a checkpoint whose owner is unknown")
	}
}

// TestOutputAfterAnIOErrorAtTheEnd: at a process's end the disk fails: the store refuses writes
// and reads of the log file fail with EIO, so the ring never gets what the process printed last.
// Once the disk is back, the completion (its end checkpoint was retried meanwhile) and a later
// poll carry the output the log file holds, not "(no output)".
func TestOutputAfterAnIOErrorAtTheEnd(t *testing.T) {
	t.Cleanup(func() { testHookReadLog.Store(nil) })
	e := newEnvStore(t, Options{StoreRetry: 20 * time.Millisecond, StoreRetryMax: 100 * time.Millisecond},
		store.Options{BusyTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	var eio atomic.Bool
	eioHook := func(path string) error {
		if eio.Load() {
			return &os.PathError{Op: "read", Path: path, Err: syscall.EIO}
		}
		return nil
	}
	testHookReadLog.Store(&eioHook)
	gate, open := e.gate("end")
	res := e.spawn(SpawnRequest{Command: waitGate(gate) + "echo printed-at-the-end", NotifyOnComplete: true})
	release := lockStore(t, e.dir)
	eio.Store(true)
	open()
	waitFor(t, "the end to wait for the failing store", func() bool {
		st, err := e.r.Poll(ctx, res.ID)
		return err == nil && st.State.Final() && e.r.Health() != nil
	})
	if st, _ := e.r.Poll(ctx, res.ID); !strings.Contains(st.Output, "could not be read") {
		t.Fatalf("poll while the log file cannot be read says %q; want it to say the output could not be read", st.Output)
	}
	eio.Store(false)
	release()
	waitFor(t, "the completion", func() bool { return len(e.completions(res.ID)) == 1 })
	if c := e.completions(res.ID); !strings.Contains(c[0].Output, "printed-at-the-end") || strings.Contains(c[0].Output, "could not be read") {
		t.Fatalf("completion output %q; want what the process printed", c[0].Output)
	}
	st, err := e.r.Poll(ctx, res.ID)
	if err != nil || !strings.Contains(st.Output, "printed-at-the-end") || st.OutputBytes != int64(len("printed-at-the-end\n")) {
		t.Fatalf("poll after the disk came back: %q (%d bytes), %v", st.Output, st.OutputBytes, err)
	}
}
