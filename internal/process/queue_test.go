package process

import (
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// Scenario 14: a completion consumed through wait, log or kill is never notified; poll alone
// does not consume.
func TestScenario14ConsumptionSuppressesNotification(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Options{})
	q := e.r.Queue()

	// Wait that returns the end consumes it.
	waited := e.spawn(SpawnRequest{Command: "echo a", NotifyOnComplete: true})
	in, err := e.r.Wait(ctx, waited.ID, long)
	if err != nil || in.State != StateExited || !in.Consumed {
		t.Fatalf("wait: %+v %v", in, err)
	}

	// A Wait blocked while the process ends: the completion is written suppressed in the same
	// transaction as the end, so there is no window in which it is claimable.
	gate, open := e.gate("blocked")
	blocked := e.spawn(SpawnRequest{Command: waitGate(gate) + "echo b", NotifyOnComplete: true})
	got := make(chan Info, 1)
	go func() {
		in, err := e.r.Wait(ctx, blocked.ID, long)
		if err != nil {
			t.Error(err)
		}
		got <- in
	}()
	waitFor(t, "waiter registered", func() bool {
		p := e.r.lookup(blocked.ID)
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.waiters == 1
	})
	open()
	if in := <-got; !in.State.Final() || !in.Consumed {
		t.Fatalf("blocked wait: %+v", in)
	}

	// Log after the end consumes; Log while running does not.
	logged := e.spawn(SpawnRequest{Command: "echo c; sleep 0.3", NotifyOnComplete: true})
	if ch, err := e.r.Log(ctx, logged.ID, 0, 100); err != nil || ch.Ended {
		t.Fatalf("log while running: %+v %v", ch, err)
	}
	e.waitEnd(logged.ID)
	if ch, err := e.r.Log(ctx, logged.ID, 0, 100); err != nil || string(ch.Data) != "c\n" || !ch.Ended {
		t.Fatalf("log after end: %+v %v", ch, err)
	}

	// Kill by the agent consumes.
	killed := e.spawn(SpawnRequest{Command: "sleep 300", NotifyOnComplete: true})
	if _, err := e.r.Kill(ctx, killed.ID, KillOptions{}); err != nil {
		t.Fatal(err)
	}

	// Poll does not consume.
	polled := e.spawn(SpawnRequest{Command: "echo d", NotifyOnComplete: true})
	e.waitEnd(polled.ID)
	if st, _ := e.r.Poll(ctx, polled.ID); st.Consumed {
		t.Fatal("poll consumed")
	}

	for _, id := range []string{waited.ID, blocked.ID, logged.ID, killed.ID} {
		cs := e.completions(id)
		if len(cs) != 1 || cs[0].QueueState != qSuppressed || cs[0].Outcome != "consumed" {
			t.Errorf("%s: completion %+v, want one suppressed", id, cs)
		}
		if c, _ := e.r.Consumed(ctx, id); !c {
			t.Errorf("%s: not consumed", id)
		}
		// The read withdrew the process's subject: its notices still in the ledger are moot.
		if why, ok, err := store.Withdrawn(ctx, e.db, Subject(id)); err != nil || !ok || why != "the agent already read the result of "+id {
			t.Errorf("%s: withdrawn %v %q %v", id, ok, why, err)
		}
	}
	if _, ok, _ := store.Withdrawn(ctx, e.db, Subject(polled.ID)); ok {
		t.Error("poll withdrew the notices")
	}
	claimed, err := q.Claim(ctx, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].ProcID != polled.ID {
		t.Fatalf("claimable: %+v, want only the polled process", claimed)
	}
}

// Consumption that happens after the delivery layer claimed the event is caught by Confirm
// (inside the boundary lock, right before the send) and by Ack.
func TestConsumeAfterClaim(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Options{})
	q := e.r.Queue()
	res := e.spawn(SpawnRequest{Command: "echo x", NotifyOnComplete: true})
	e.waitEnd(res.ID)
	c, err := q.Claim(ctx, 10, time.Minute)
	if err != nil || len(c) != 1 {
		t.Fatalf("claim %v %v", c, err)
	}
	if err := q.Confirm(ctx, c[0].Seq, c[0].Token); err != nil {
		t.Fatalf("confirm before consume: %v", err)
	}
	if _, err := e.r.Log(ctx, res.ID, 0, 10); err != nil { // the agent reads the log
		t.Fatal(err)
	}
	if err := q.Confirm(ctx, c[0].Seq, c[0].Token); !isErr(err, ErrSuppressed) {
		t.Fatalf("confirm after consume: %v", err)
	}
	if err := q.Ack(ctx, c[0].Seq, c[0].Token, "delivered"); !isErr(err, ErrSuppressed) {
		t.Fatalf("ack after consume: %v", err)
	}
}

func TestQueueClaimAckReleaseAcrossRestart(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	e := newEnv(t, Options{Now: clk.Now})
	var ids []string
	for i := 0; i < 3; i++ {
		res := e.spawn(SpawnRequest{Command: "true", NotifyOnComplete: true})
		e.waitEnd(res.ID)
		ids = append(ids, res.ID)
	}
	q := e.r.Queue()
	select {
	case <-q.Wake():
	default:
		t.Fatal("no wake-up after completions were queued")
	}
	a, err := q.Claim(ctx, 2, time.Minute)
	if err != nil || len(a) != 2 || a[0].ProcID != ids[0] || a[1].ProcID != ids[1] || a[0].Attempt != 1 {
		t.Fatalf("first claim %+v %v", a, err)
	}
	b, _ := q.Claim(ctx, 10, time.Minute)
	if len(b) != 1 || b[0].ProcID != ids[2] {
		t.Fatalf("second claim %+v", b)
	}
	if more, _ := q.Claim(ctx, 10, time.Minute); len(more) != 0 {
		t.Fatalf("claimed twice: %+v", more)
	}
	// Done is final.
	if err := q.Ack(ctx, a[0].Seq, a[0].Token, "delivered"); err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(ctx, a[0].Seq, a[0].Token, "delivered"); !isErr(err, ErrClaimLost) {
		t.Fatalf("second ack: %v", err)
	}
	// Release with a delay: not before it passes, then with attempt 2.
	if err := q.Release(ctx, a[1].Seq, a[1].Token, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if c, _ := q.Claim(ctx, 10, time.Minute); len(c) != 0 {
		t.Fatalf("released event handed out before its delay: %+v", c)
	}
	clk.Advance(11 * time.Second)
	c, _ := q.Claim(ctx, 10, time.Minute)
	if len(c) != 1 || c[0].Seq != a[1].Seq || c[0].Attempt != 2 {
		t.Fatalf("reclaim after release %+v", c)
	}
	// A lease that runs out makes the event claimable again; the old token is then useless.
	clk.Advance(2 * time.Minute)
	d, _ := q.Claim(ctx, 10, time.Minute)
	if len(d) != 2 {
		t.Fatalf("expired leases not reclaimed: %+v", d)
	}
	if err := q.Ack(ctx, b[0].Seq, b[0].Token, "late"); !isErr(err, ErrClaimLost) {
		t.Fatalf("ack with a stale token: %v", err)
	}
	if err := q.Ack(ctx, d[0].Seq, d[0].Token, "delivered"); err != nil {
		t.Fatal(err)
	}
	// Restart: the one still claimed comes back once; the done ones never.
	e.reopen()
	q = e.r.Queue()
	r, _ := q.Claim(ctx, 10, time.Minute)
	if len(r) != 1 || r[0].Seq != d[1].Seq {
		t.Fatalf("after restart %+v", r)
	}
	if err := q.Ack(ctx, r[0].Seq, r[0].Token, "delivered"); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if r, _ := e.r.Queue().Claim(ctx, 10, time.Minute); len(r) != 0 {
		t.Fatalf("done events handed out again after restart: %+v", r)
	}
}

func TestQueueNextBlocksUntilAnEvent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Options{})
	q := e.r.Queue()
	got := make(chan []Claimed, 1)
	go func() {
		c, err := q.Next(ctx, 10, time.Minute, time.Hour) // only a wake-up can end it
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	res := e.spawn(SpawnRequest{Command: "echo hi", NotifyOnComplete: true})
	select {
	case c := <-got:
		if len(c) != 1 || c[0].ProcID != res.ID || c[0].Output != "hi" {
			t.Fatalf("next %+v", c)
		}
	case <-time.After(long):
		t.Fatal("Next did not wake up")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := q.Next(cctx, 1, time.Minute, time.Hour); err == nil {
		t.Fatal("Next ignored its context")
	}
}
