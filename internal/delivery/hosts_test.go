package delivery

import (
	"context"
	"database/sql"
	"errors"
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
		ids = append(ids, enqueueNumbered(t, a, chats, i))
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

// enqueueNumbered enqueues message "m<i>" to chat i%chats through l and returns its id.
func enqueueNumbered(t *testing.T, l *Ledger, chats, i int) string {
	t.Helper()
	chat := fmt.Sprint(i % chats)
	id, err := l.Enqueue(context.Background(), Message{Plugin: "echo", Profile: "main", Key: "echo:main:dm:" + chat,
		Target: abi.OutboundMessage{ChatID: chat}, Text: fmt.Sprint("m", i), Kind: KindReply})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// pausing is a transport whose Reserve calls wait while the host is paused (as a host stopped
// by SIGSTOP, or starved under load, sits between reading a row and sending it), then fail: the
// lane's attempt ends in the retry path with the row it read before the pause.
type pausing struct {
	*platform
	mu      sync.Mutex
	resume  chan struct{}
	paused  chan struct{} // closed at the first Reserve that waits
	waiting bool
}

func (p *pausing) Reserve(ctx context.Context, plugin string) (Sender, error) {
	p.mu.Lock()
	if !p.waiting {
		p.waiting = true
		close(p.paused)
	}
	p.mu.Unlock()
	select {
	case <-p.resume:
	case <-ctx.Done():
	}
	return nil, errors.New("the host was paused")
}

// A host whose lanes' leases lapse while it still runs (paused between reading rows and sending
// them) writes nothing over what the hosts that took the lanes over did: with three hosts on
// PostgreSQL and 64 chats, each message reaches the platform exactly once, and every row ends
// delivered. Before the ledger's writes were compare-and-sets, the paused host's retry put rows
// the others had delivered back to pending, and they were sent again.
func TestPausedHostWritesNothing(t *testing.T) {
	b := storetest.Postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &platform{}
	paused := &pausing{platform: p, resume: make(chan struct{}), paused: make(chan struct{})}
	var mu sync.Mutex
	delivered := map[string]bool{}
	changed := make(chan struct{}, 1)
	open := func(tr Transport) (*Ledger, *sql.DB) {
		db := b.Open(t)
		k, err := session.Open(ctx, db, session.Options{})
		if err != nil {
			t.Fatal(err)
		}
		leases, err := lease.New(ctx, db, lease.InstanceID(), 300*time.Millisecond, clock.Real{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := Open(ctx, db, k, tr, Options{Logger: slog.New(slog.DiscardHandler), Sweep: 20 * time.Millisecond, Leases: leases,
			Backoff: 5 * time.Millisecond, Observer: func(r Row) {
				if r.State == Delivered {
					mu.Lock()
					delivered[r.ID] = true
					mu.Unlock()
					select {
					case changed <- struct{}{}:
					default:
					}
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		return l, db
	}
	a, db := open(paused)
	others := []*Ledger{}
	for range 2 {
		l, _ := open(p)
		others = append(others, l)
	}
	const chats, each = 64, 3
	var ids []string
	enqueue := func(l *Ledger, i int) { ids = append(ids, enqueueNumbered(t, l, chats, i)) }
	// The paused host starts first and takes the lanes: every one of its lanes reads a row and
	// then waits in Reserve, holding a lease it can no longer renew.
	if _, err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		for _, l := range append(others, a) {
			l.Stop()
		}
	}()
	for i := range chats {
		enqueue(a, i)
	}
	<-paused.paused
	for _, l := range others {
		if _, err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := chats; i < chats*each; i++ {
		enqueue(others[i%2], i)
	}
	// The other hosts claim the lapsed lanes and deliver everything.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
			select {
			case <-changed:
			case <-time.After(50 * time.Millisecond): // the database is the truth: look again
			}
		}
	}
	allDelivered := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if !delivered[id] {
				return false
			}
		}
		return true
	}
	waitFor("the other hosts delivered every row", allDelivered)
	// The paused host resumes: its attempts fail and take the retry path with stale rows.
	close(paused.resume)
	unsettled := func() int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM deliveries WHERE state <> 'delivered'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Give the resumed host's lanes their attempt: wait until each has been through Reserve's
	// failure and its lane has retired (it finds nothing to send) or let a resent row show.
	waitFor("the paused host's lanes retired", func() bool {
		a.mu.Lock()
		n := len(a.lanes)
		a.mu.Unlock()
		return n == 0 || unsettled() > 0
	})
	if n := unsettled(); n > 0 {
		rows, _ := a.List(ctx, Filter{State: Pending, Limit: 3})
		t.Errorf("%d rows the other hosts delivered are open again after the paused host resumed, e.g. %+v", n, rows)
	}
	seen := map[string]int{}
	for _, text := range p.texts() {
		seen[text]++
	}
	for i := range chats * each {
		if n := seen[fmt.Sprint("m", i)]; n != 1 {
			t.Errorf("m%d sent %d times", i, n)
		}
	}
}

// A host waiting for a message's outcome (a streamed draft's turn waits for each post) hears
// of it when another host's lane settled the row: the lane's lease lapsed while this host was
// paused, and another host took the lane over and delivered it. Found by the promise checker
// (internal/sim, 3 hosts with pauses): Wait listened only to this host's own lanes, so the turn
// waited forever and every later message of the chat queued behind it.
func TestWaitSeesAnotherHostsOutcome(t *testing.T) {
	b := storetest.Postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &platform{}
	paused := &pausing{platform: p, resume: make(chan struct{}), paused: make(chan struct{})}
	defer close(paused.resume)
	open := func(tr Transport) *Ledger {
		db := b.Open(t)
		k, err := session.Open(ctx, db, session.Options{})
		if err != nil {
			t.Fatal(err)
		}
		leases, err := lease.New(ctx, db, lease.InstanceID(), 300*time.Millisecond, clock.Real{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := Open(ctx, db, k, tr, Options{Logger: slog.New(slog.DiscardHandler), Sweep: 20 * time.Millisecond, Leases: leases,
			Backoff: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, other := open(paused), open(p)
	defer func() {
		cancel()
		a.Stop()
		other.Stop()
	}()
	if _, err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	group := enqueueNumbered(t, a, 1, 0)
	<-paused.paused // a's lane holds the row and a lease it cannot renew
	got := make(chan Row, 1)
	go func() {
		wctx, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		r, err := a.Wait(wctx, group)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		got <- r
	}()
	if _, err := other.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.State != Delivered {
		t.Fatalf("Wait on the paused host returned %+v, want the row the other host delivered", r)
	}
}
