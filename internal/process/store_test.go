package process

import (
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// The store suite, on both backends: a checkpoint applies only over an older generation and
// reads back field for field (booleans, a NULL exit code, then a set one); a process's
// completion is queued once however often it is inserted; and the queue's claim, confirm and
// ack move it through its states, a claimed event not being claimed twice.
func TestStoreSuite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		e := newEnvOn(t, b, Options{})

		in := storedInfo("proc_store", 0, 7)
		in.Adopted, in.WatchPatterns = true, []string{"ERR"}
		if !putRow(t, e.db, in) {
			t.Fatal("first checkpoint not applied")
		}
		older := in
		older.Gen, older.Command = 1, "stale"
		if putRow(t, e.db, older) {
			t.Fatal("an older generation overwrote the checkpoint")
		}
		got := e.row("proc_store")
		if got.Command != "sleep 300" || !got.NotifyOnComplete || !got.Adopted || got.Consumed || got.WatchDisabled ||
			got.ExitCode != nil || got.StartTicks != 7 || len(got.WatchPatterns) != 1 || got.Stamp.SessionID != "S1" {
			t.Fatalf("read back %+v", got)
		}
		code := 3
		newer := in
		newer.Gen, newer.State, newer.ExitCode, newer.Consumed, newer.EndedAt = 3, StateExited, &code, true, time.Now()
		if !putRow(t, e.db, newer) {
			t.Fatal("a newer generation was not applied")
		}
		if got := e.row("proc_store"); got.State != StateExited || got.ExitCode == nil || *got.ExitCode != 3 || !got.Consumed || got.EndedAt.IsZero() {
			t.Fatalf("after the newer checkpoint %+v", got)
		}

		res := e.spawn(SpawnRequest{Command: "echo done", NotifyOnComplete: true})
		e.waitEnd(res.ID)
		if c := e.completions(res.ID); len(c) != 1 || c[0].QueueState != qPending {
			t.Fatalf("completions %+v", c)
		}
		err := store.Update(ctx, e.db, store.PathProcesses, func(tx *store.Tx) error {
			inserted, err := insertEvent(ctx, newStmtTx(tx), &Event{ProcID: res.ID, Kind: EventCompletion}, qPending, time.Now())
			if err == nil && inserted {
				t.Error("a second completion was queued")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}

		q := e.r.Queue()
		claimed, err := q.Claim(ctx, 10, time.Minute)
		if err != nil || len(claimed) != 1 || claimed[0].Event.ProcID != res.ID || claimed[0].Attempt != 1 {
			t.Fatalf("claim %+v %v", claimed, err)
		}
		if again, err := q.Claim(ctx, 10, time.Minute); err != nil || len(again) != 0 {
			t.Fatalf("claimed twice: %+v %v", again, err)
		}
		c := claimed[0]
		if err := q.Confirm(ctx, c.Seq, c.Token); err != nil {
			t.Fatal(err)
		}
		if err := q.Ack(ctx, c.Seq, "wrong-token", "delivered"); !isErr(err, ErrClaimLost) {
			t.Fatalf("ack with another token: %v", err)
		}
		if err := q.Ack(ctx, c.Seq, c.Token, "delivered"); err != nil {
			t.Fatal(err)
		}
		if recs := e.completions(res.ID); len(recs) != 1 || recs[0].QueueState != qDone || recs[0].Outcome != "delivered" || recs[0].Attempts != 1 {
			t.Fatalf("after ack %+v", recs)
		}
	})
}

// A database whose processes were read by the agent before reads withdrew their subject gets
// those withdrawals when it is migrated, so their notices still in the ledger stay moot; on both
// backends.
func TestMigrationWithdrawsWhatWasReadBefore(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		if err := store.Migrate(ctx, db, Component, migrations[:2]); err != nil {
			t.Fatal(err)
		}
		read, unread := storedInfo("proc_read", 0, 1), storedInfo("proc_unread", 0, 1)
		read.State, read.Consumed, read.EndedAt = StateExited, true, time.Now()
		putRow(t, db, read)
		putRow(t, db, unread)
		if err := Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		if why, ok, err := store.Withdrawn(ctx, db, Subject("proc_read")); err != nil || !ok || why != "the agent already read the result of proc_read" {
			t.Fatalf("the process read before: %v %q %v", ok, why, err)
		}
		if _, ok, err := store.Withdrawn(ctx, db, Subject("proc_unread")); err != nil || ok {
			t.Fatalf("the process not read: %v %v", ok, err)
		}
	})
}
