package delivery

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

func uncertain(abi.OutboundMessage) (*abi.SendResult, error) {
	return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendUncertain, Message: "no answer in time"}}, nil
}

func notConnected(abi.OutboundMessage) (*abi.SendResult, error) {
	return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: abi.SendNotConnected,
		Message: "not connected yet; not sent", RetryAfterMs: 3000}}, nil
}

// count returns how many messages the platform accepted whose text contains sub.
func (p *platform) count(sub string) int {
	n := 0
	for _, s := range p.texts() {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// An uncertain answer is never silent: after a two-part reply whose parts both have an unknown
// outcome, the chat gets exactly one notice, once the platform answers again (here: another
// chat's message is delivered), and /last's source, Last, finds the reply.
func TestUncertainReplyGetsOneNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &platform{limit: abi.MessageLimit{Max: 30, Unit: abi.UnitCodePoint}}
		p.answers = append(p.answers, uncertain, uncertain)
		f := newFixture(t, p, Options{})
		st := f.stamp()
		id, err := f.l.Enqueue(context.Background(), f.msg(st, "0123456789 abcdefghij klmnopqrst uvwxyz", GuardWork))
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range []string{id + ".1", id + ".2"} {
			if r := f.waitFinal(part); !r.Uncertain() {
				t.Fatalf("part %s: %+v", part, r)
			}
		}
		// The platform has not answered since: the notice waits (without using attempts).
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := p.count(UncertainNotice); n != 0 {
			t.Fatalf("the notice went out before the platform answered again")
		}
		other := f.msg(st, "other", GuardNone)
		other.Target.ChatID, other.Key = "43", "echo:main:dm:43"
		if _, err := f.l.Enqueue(context.Background(), other); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := p.count(UncertainNotice); n != 1 {
			t.Fatalf("%d notices after the platform answered again; sent %q", n, p.texts())
		}
		last, ok, err := f.l.Last(context.Background(), st.Key)
		if err != nil || !ok || len(last.Parts) != 2 || !strings.HasPrefix(last.Parts[0], "0123456789") || last.Kind != KindReply || last.Guard != GuardLineage {
			t.Fatalf("Last: %+v %v %v", last, ok, err)
		}
		// With no other traffic, the next notice goes once UncertainHold has passed.
		p.mu.Lock()
		p.answers = append(p.answers, uncertain)
		p.mu.Unlock()
		id2, _ := f.l.Enqueue(context.Background(), f.msg(st, "again", GuardWork))
		f.waitFinal(id2)
		time.Sleep(40 * time.Second)
		synctest.Wait()
		if n := p.count(UncertainNotice); n != 2 {
			t.Fatalf("%d notices in all; want 2", n)
		}
	})
}

// "Not connected" is not an attempt: a reply the plugin reports certainly not sent while its
// socket reconnects waits for the connection far past MaxAttempts retries, and is delivered once
// the plugin is connected; one that waits past UndeliveredAfter fails, and the chat is told once
// the connection is back.
func TestNotConnectedWaitsForTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &platform{}
		for range 20 { // a minute of a reconnect storm, looked at every 3 s
			p.answers = append(p.answers, notConnected)
		}
		f := newFixture(t, p, Options{})
		st := f.stamp()
		id, _ := f.l.Enqueue(context.Background(), f.msg(st, "reply", GuardWork))
		r := f.waitLong(id)
		if r.State != Delivered || r.Attempts != 1 {
			t.Fatalf("after the reconnect storm: %+v", r)
		}

		g := newFixture(t, p, Options{UndeliveredAfter: 30 * time.Second})
		p.mu.Lock()
		for range 20 {
			p.answers = append(p.answers, notConnected)
		}
		p.mu.Unlock()
		st = g.stamp()
		id, _ = g.l.Enqueue(context.Background(), g.msg(st, "lost", GuardWork))
		r = g.waitLong(id)
		if r.State != Failed || !strings.Contains(r.Reason, "not connected for 30s") || r.Uncertain() {
			t.Fatalf("past undelivered_after: %+v", r)
		}
		if n := p.count(UndeliveredNotice); n != 0 {
			t.Fatal("the notice went out while not connected")
		}
		time.Sleep(time.Minute) // the storm ends; the notice, waiting for the connection, goes
		synctest.Wait()
		if n := p.count(UndeliveredNotice); n != 1 {
			t.Fatalf("%d undelivered notices; sent %q", n, p.texts())
		}
	})
}

// waitLong is waitFinal for a row that takes minutes of fake time (inside a synctest bubble).
func (f *fixture) waitLong(id string) Row {
	f.t.Helper()
	for range 600 {
		f.mu.Lock()
		r, ok := f.final[id]
		f.mu.Unlock()
		if ok {
			return r
		}
		time.Sleep(time.Second)
	}
	f.t.Fatalf("row %s not final after 10 minutes", id)
	return Row{}
}

// A send's outcome is recorded whatever the store does meanwhile: when the platform refuses a
// send (retryable) while another process holds the database's write lock, the retry is recorded
// once the store takes writes again, and the reply is then delivered. Given up, the row would
// stay "sending", and a restart would call a reply certainly not sent "outcome unknown".
func TestOutcomeRecordedThroughAStoreOutage(t *testing.T) {
	b := storetest.SQLite(t)
	p := &platform{}
	locked := make(chan func(), 1)
	p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
		// Another process takes the write lock while the platform answers.
		db, err := store.OpenSource(context.Background(), b.Source, b.Dir, store.Options{})
		if err != nil {
			t.Error(err)
			return nil, err
		}
		conn, err := db.Conn(context.Background())
		if err == nil {
			_, err = conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`)
		}
		if err != nil {
			t.Error(err)
			return nil, err
		}
		locked <- func() { conn.ExecContext(context.Background(), `ROLLBACK`); conn.Close(); db.Close() }
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "server_error", Message: "try again"}}, nil
	})
	f := newFixtureOn(t, b, p, Options{})
	st := f.stamp()
	id, _ := f.l.Enqueue(context.Background(), f.msg(st, "through the outage", GuardNone))
	release := <-locked
	// The store refuses the ledger's write of the retry (reported to its write health).
	h := store.HealthOf(f.l.db)
	for deadline := time.Now().Add(time.Minute); len(h.Failing()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ledger's write was never refused")
		}
	}
	release()
	if r := f.waitFinal(id); r.State != Delivered {
		t.Fatalf("after the outage: %+v", r)
	}
	if n := p.count("through the outage"); n != 1 {
		t.Fatalf("delivered %d times", n)
	}
}
