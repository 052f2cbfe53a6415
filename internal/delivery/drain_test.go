package delivery

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// TestDrainWaitsForWhatIsDue: Drain returns once the message being sent has been sent, not
// before; a message a platform's retry_after put off does not hold it (it stays pending for the
// next start).
func TestDrainWaitsForWhatIsDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &platform{block: make(chan chan struct{})}
		f := newFixture(t, p, Options{})
		st := f.stamp()
		a, _ := f.l.Enqueue(context.Background(), f.msg(st, "in flight", GuardNone))
		release := <-p.block // the send is at the platform
		drained := make(chan bool, 1)
		go func() { drained <- f.l.Drain(context.Background()) }()
		synctest.Wait()
		select {
		case <-drained:
			t.Fatal("Drain returned while a send was in flight")
		default:
		}
		p.block = nil
		close(release)
		if !<-drained {
			t.Fatal("Drain reported it did not get there")
		}
		if r := f.waitFinal(a); r.State != Delivered {
			t.Fatalf("the message in flight: %+v", r)
		}

		// A platform's retry_after of an hour: the lane waits, and that is drained.
		p.mu.Lock()
		p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "flood", RetryAfterMs: 3_600_000}}, nil
		})
		p.mu.Unlock()
		b, _ := f.l.Enqueue(context.Background(), f.msg(st, "put off", GuardNone))
		if !f.l.Drain(context.Background()) {
			t.Fatal("Drain with a lane waiting for retry_after")
		}
		rows, err := f.l.List(context.Background(), Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Group == b && r.State != Pending {
				t.Fatalf("the message put off: %+v, want pending", r)
			}
		}
	})
}

// TestStopWithoutCancel: a draining host stops the ledger before it cancels Start's context (a
// send in progress is not cut): Stop returns, the sweeper of a shared database included.
func TestStopWithoutCancel(t *testing.T) {
	f := newFixture(t, &platform{}, Options{Sweep: time.Minute})
	stopped := make(chan struct{})
	go func() { f.l.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(testdeadline.Scale(10 * time.Second)):
		t.Fatal("Stop did not return while Start's context was live")
	}
}
