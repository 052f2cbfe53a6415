package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/clock"
	"github.com/hermes-host/hermes-host/internal/lease"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// Two hosts on one database, each with its own pool, kernel and ledger: every row
// is sent exactly once, whichever host's lane reaches it first (on PostgreSQL with the hosts
// sweeping each other's lanes too).
func TestTwoHostsSendEachRowOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) { twoHosts(t, b, false) })
	// With lane leases (as the gateway runs several hosts), each lane runs in one host at a time.
	t.Run("postgres-leased", func(t *testing.T) { twoHosts(t, storetest.Postgres(t), true) })
}

func twoHosts(t *testing.T, b storetest.Backend, leased bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &platform{}
	var mu sync.Mutex
	final := map[string]State{}
	done := sync.NewCond(&mu)
	open := func() *Ledger {
		db := b.Open(t)
		var err error
		k, err := session.Open(ctx, db, session.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// On SQLite the two hosts' boundaries are each host's own (two hosts on one SQLite
		// file is not a supported deployment): no sweeper, whose reconciliation relies on a
		// shared boundary; the claim alone must keep each row to one send.
		var (
			sweep  time.Duration
			leases *lease.Manager
		)
		if b.Name == "postgres" {
			sweep = 5 * time.Millisecond
			if leased {
				if leases, err = lease.New(ctx, db, lease.InstanceID(), time.Second, clock.Real{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		l, err := Open(ctx, db, k, p, Options{Logger: slog.New(slog.DiscardHandler), Sweep: sweep, Leases: leases,
			Backoff: 5 * time.Millisecond, Observer: func(r Row) {
				mu.Lock()
				if r.State.Final() {
					final[r.ID] = r.State
					done.Broadcast()
				}
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, c := open(), open()
	// Rows enqueued while no host runs: both hosts find them at Start and race for them.
	const chats, each = 8, 12
	var ids []string
	for i := range chats * each {
		chat := fmt.Sprint(i % chats)
		id, err := a.Enqueue(ctx, Message{Plugin: "echo", Profile: "main", Key: "echo:main:dm:" + chat,
			Target: abi.OutboundMessage{ChatID: chat}, Text: fmt.Sprint("m", i), Kind: KindReply})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	time.Sleep(10 * time.Millisecond) // let the rows age past c's sweep threshold
	for _, l := range []*Ledger{a, c} {
		if _, err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { cancel(); a.Stop(); c.Stop() }()
	mu.Lock()
	deadline := time.AfterFunc(20*time.Second, func() { mu.Lock(); done.Broadcast(); mu.Unlock() })
	start := time.Now()
	for len(final) < len(ids) && time.Since(start) < 20*time.Second {
		done.Wait()
	}
	deadline.Stop()
	mu.Unlock()
	seen := map[string]int{}
	for _, text := range p.texts() {
		seen[text]++
	}
	for i := range chats * each {
		if n := seen[fmt.Sprint("m", i)]; n != 1 {
			t.Errorf("m%d sent %d times", i, n)
		}
	}
	for _, id := range ids {
		if final[id] != Delivered {
			t.Errorf("%s: %q", id, final[id])
		}
	}
}
