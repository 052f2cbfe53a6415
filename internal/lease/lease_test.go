package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/fakeclock"
	"github.com/hermes-host/hermes-host/internal/clock"
	"github.com/hermes-host/hermes-host/internal/lease"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

const ttl = 30 * time.Second

var t0 = time.UnixMilli(1_800_000_000_000)

// manager returns a Manager for holder on a database pool of its own (as another instance
// would have), on clk.
func manager(t *testing.T, b storetest.Backend, holder string, clk clock.Clock) (*lease.Manager, *sql.DB) {
	t.Helper()
	db := b.Open(t)
	m, err := lease.New(context.Background(), db, holder, ttl, clk)
	if err != nil {
		t.Fatal(err)
	}
	m.Log = slog.New(slog.DiscardHandler)
	return m, db
}

func acquire(t *testing.T, m *lease.Manager, name string) int64 {
	t.Helper()
	fence, ok, err := m.TryAcquire(context.Background(), name)
	if err != nil || !ok {
		t.Fatalf("%s acquire %s: ok=%v err=%v", m.Holder(), name, ok, err)
	}
	return fence
}

func refused(t *testing.T, m *lease.Manager, name string) {
	t.Helper()
	if _, ok, err := m.TryAcquire(context.Background(), name); err != nil || ok {
		t.Fatalf("%s acquired %s, held by another (err %v)", m.Holder(), name, err)
	}
}

// Two instances (two pools) trying for the same names at once: each name goes to one.
func TestTryAcquireMutualExclusion(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clk := fakeclock.New(t0)
		a, _ := manager(t, b, "A", clk)
		bm, _ := manager(t, b, "B", clk)
		const names = 32
		won := make([][2]bool, names)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range names {
			for j, m := range []*lease.Manager{a, bm} {
				wg.Go(func() {
					<-start
					_, ok, err := m.TryAcquire(context.Background(), fmt.Sprintf("loop:p/%d", i))
					if err != nil {
						t.Error(err)
					}
					won[i][j] = ok
				})
			}
		}
		close(start)
		wg.Wait()
		for i, w := range won {
			if w[0] == w[1] {
				t.Fatalf("name %d: A got it %v, B got it %v; want exactly one", i, w[0], w[1])
			}
		}
		// The holder acquiring again renews, keeping the fence; the other is still refused.
		name := "loop:p/0"
		holder, other := a, bm
		if won[0][1] {
			holder, other = bm, a
		}
		f1 := acquire(t, holder, name)
		clk.Advance(ttl / 2)
		if f2 := acquire(t, holder, name); f2 != f1 {
			t.Fatalf("re-acquiring a held lease changed its fence %d to %d", f1, f2)
		}
		refused(t, other, name)
	})
}

// An expired lease goes to whoever asks, with a new fence; its former holder finds it lost
// and cannot release or renew it from under the new one.
func TestExpiryTakeoverBumpsFence(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a, _ := manager(t, b, "A", clk)
		bm, _ := manager(t, b, "B", clk)
		fa := acquire(t, a, "turn:1")
		clk.Advance(ttl)
		refused(t, bm, "turn:1") // expiring now is not expired
		clk.Advance(time.Millisecond)
		fb := acquire(t, bm, "turn:1")
		if fb != fa+1 {
			t.Fatalf("fence after takeover %d, want %d", fb, fa+1)
		}
		if err := a.Renew(ctx, "turn:1", fa); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("old holder's renew: %v, want ErrLost", err)
		}
		if err := a.Release(ctx, "turn:1", fa); err != nil {
			t.Fatal(err)
		}
		refused(t, a, "turn:1") // the stale release did not free it
		if err := bm.Renew(ctx, "turn:1", fb); err != nil {
			t.Fatal(err)
		}
		if err := bm.Release(ctx, "turn:1", fb); err != nil {
			t.Fatal(err)
		}
		if f := acquire(t, a, "turn:1"); f != fb+1 { // released: free at once, new fence
			t.Fatalf("fence after release %d, want %d", f, fb+1)
		}
		// A holder re-acquiring its own lease after it expired gets a new fence too: what it
		// did under the old one may have overlapped someone else's takeover.
		f := acquire(t, a, "turn:2")
		clk.Advance(ttl + time.Millisecond)
		if f2 := acquire(t, a, "turn:2"); f2 != f+1 {
			t.Fatalf("re-acquired after expiry with fence %d, want %d", f2, f+1)
		}
	})
}

// Many instances claiming expired work at once: every expired lease under the prefix goes to
// exactly one of them, nothing else is claimed.
func TestClaimExpiredConcurrent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		dead, _ := manager(t, b, "dead", clk)
		const work = 120
		want := map[string]bool{}
		for i := range work {
			name := fmt.Sprintf("turn:%03d", i)
			acquire(t, dead, name)
			want[name] = true
		}
		for _, other := range []string{"lane:1", "TURN:upper", "turn", "turn_x", "tur"} {
			acquire(t, dead, other)
		}
		clk.Advance(ttl + time.Millisecond)
		for i := range 5 { // alive: not expired
			acquire(t, dead, fmt.Sprintf("turn:live%d", i))
		}

		const claimers = 6
		got := map[string]string{}
		var mu sync.Mutex
		start := make(chan struct{})
		var wg sync.WaitGroup
		for c := range claimers {
			m, _ := manager(t, b, fmt.Sprintf("c%d", c), clk)
			wg.Go(func() {
				<-start
				for {
					claims, err := m.ClaimExpired(ctx, "turn:", 7)
					if err != nil {
						t.Error(err)
						return
					}
					if len(claims) == 0 {
						return
					}
					mu.Lock()
					for _, cl := range claims {
						if prev, ok := got[cl.Name]; ok {
							t.Errorf("%s claimed by %s and %s", cl.Name, prev, m.Holder())
						}
						got[cl.Name] = m.Holder()
						if cl.Fence != 2 {
							t.Errorf("%s claimed with fence %d, want 2", cl.Name, cl.Fence)
						}
					}
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		for name := range got {
			if !want[name] {
				t.Errorf("claimed %s, which is not expired work under turn:", name)
			}
		}
		if len(got) != work {
			t.Fatalf("claimed %d leases, want %d", len(got), work)
		}
		per := map[string]int{}
		for _, h := range got {
			per[h]++
		}
		t.Logf("claims per claimer: %v", per)
		// A claimed lease is held: the dead holder cannot take it back.
		refused(t, dead, "turn:000")
	})
}

// On PostgreSQL a claimer passes over a row another transaction has locked instead of waiting.
func TestClaimExpiredSkipsLockedRows(t *testing.T) {
	b := storetest.Postgres(t)
	ctx := context.Background()
	clk := fakeclock.New(t0)
	dead, db := manager(t, b, "dead", clk)
	for _, n := range []string{"lane:a", "lane:b", "lane:c"} {
		acquire(t, dead, n)
	}
	clk.Advance(ttl + time.Millisecond)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var locked string
	if err := tx.QueryRowContext(ctx, `SELECT name FROM leases WHERE name = 'lane:b' FOR UPDATE`).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	m, _ := manager(t, b, "claimer", clk)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	claims, err := m.ClaimExpired(cctx, "lane:", 10)
	if err != nil {
		t.Fatalf("claim while a row is locked: %v (blocked on it?)", err)
	}
	if len(claims) != 2 || claims[0].Name == "lane:b" || claims[1].Name == "lane:b" {
		t.Fatalf("claims %v, want lane:a and lane:c", claims)
	}
	tx.Rollback()
	claims, err = m.ClaimExpired(ctx, "lane:", 10)
	if err != nil || len(claims) != 1 || claims[0].Name != "lane:b" {
		t.Fatalf("after the lock: %v, %v", claims, err)
	}
}

// settle waits until n goroutines wait on clk for a time still ahead: everything due at the
// clock's time has run.
func settle(t *testing.T, clk *fakeclock.Clock, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); clk.Waiting() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines wait on the clock, want %d", clk.Waiting(), n)
		}
	}
}

func expiresAt(t *testing.T, db *sql.DB, name string) (exp, fence int64, holder string) {
	t.Helper()
	if err := db.QueryRow(`SELECT expires_at, fence, holder FROM leases WHERE name = $1`, name).Scan(&exp, &fence, &holder); err != nil {
		t.Fatal(err)
	}
	return exp, fence, holder
}

// Hold renews while fn runs, refuses a second holder, cancels fn when the lease is taken from
// under it, and releases when fn returns by itself.
func TestHold(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a, db := manager(t, b, "A", clk)
		bm, _ := manager(t, b, "B", clk)

		started := make(chan struct{})
		var cause error
		held := make(chan error, 1)
		go func() {
			held <- a.Hold(ctx, "job", func(ctx context.Context) {
				close(started)
				<-ctx.Done()
				cause = context.Cause(ctx)
			})
		}()
		<-started
		settle(t, clk, 1) // the renewer
		if err := bm.Hold(ctx, "job", func(context.Context) { t.Error("B ran while A holds") }); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("B's hold: %v, want ErrHeld", err)
		}
		if err := a.Hold(ctx, "job", func(context.Context) { t.Error("A ran twice") }); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("A's second hold: %v, want ErrHeld", err)
		}
		for range 4 {
			clk.Advance(ttl / 3)
			settle(t, clk, 1)
			if exp, _, _ := expiresAt(t, db, "job"); exp != clk.Now().Add(ttl).UnixMilli() {
				t.Fatalf("expires %d, want renewed to %d", exp, clk.Now().Add(ttl).UnixMilli())
			}
		}
		// Someone takes the lease over (as after a pause longer than the ttl): A's next
		// renewal finds it gone and cancels fn.
		if _, err := db.Exec(`UPDATE leases SET holder = 'thief', fence = fence + 1 WHERE name = 'job'`); err != nil {
			t.Fatal(err)
		}
		clk.Advance(ttl / 3)
		if err := <-held; !errors.Is(err, lease.ErrLost) {
			t.Fatalf("hold returned %v, want ErrLost", err)
		}
		if !errors.Is(cause, lease.ErrLost) {
			t.Fatalf("fn's ctx cancelled by %v, want ErrLost", cause)
		}
		if _, _, h := expiresAt(t, db, "job"); h != "thief" {
			t.Fatalf("holder %s after A lost the lease, want thief", h)
		}

		// fn returning by itself releases the lease: B takes it at once.
		ran := false
		if err := a.Hold(ctx, "other", func(context.Context) { ran = true }); err != nil || !ran {
			t.Fatalf("hold: %v, ran %v", err, ran)
		}
		acquire(t, bm, "other")
	})
}

// The holder's instance dies (its database goes away: no renewal, no release). The standby
// runs fn only after the lease expired, by then the holder's fn has stopped, and at no time do
// two run at once.
func TestCampaignTakeoverAfterHolderDies(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clk := fakeclock.New(t0)
		a, dbA := manager(t, b, "A", clk)
		bm, dbB := manager(t, b, "B", clk)
		var running, most atomic.Int32
		started := make(chan string, 4)
		stopped := make(chan string, 4)
		fn := func(who string) func(context.Context) {
			return func(ctx context.Context) {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				started <- who
				<-ctx.Done()
				running.Add(-1)
				stopped <- who
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() { a.Campaign(ctx, "loop:poller/main", fn("A")) })
		if who := <-started; who != "A" {
			t.Fatalf("%s started first", who)
		}
		wg.Go(func() { bm.Campaign(ctx, "loop:poller/main", fn("B")) })
		settle(t, clk, 2) // A's renewer, B's next try
		notStarted := func() {
			t.Helper()
			select {
			case who := <-started:
				t.Fatalf("%s started at %v while A's lease is live", who, clk.Now().Sub(t0))
			default:
			}
		}
		for range 3 {
			clk.Advance(ttl / 3)
			settle(t, clk, 2)
			notStarted()
		}
		last, fence, _ := expiresAt(t, dbB, "loop:poller/main")
		dbA.Close() // A is gone: it renews no more and releases nothing
		clk.Advance(ttl / 3)
		settle(t, clk, 2)
		if who := <-stopped; who != "A" {
			t.Fatalf("%s stopped", who)
		}
		for clk.Now().UnixMilli() < last {
			notStarted()
			clk.Advance(ttl / 3)
			settle(t, clk, 2)
		}
		notStarted() // at the expiry itself the lease is still A's
		clk.Advance(ttl / 3)
		settle(t, clk, 2)
		select {
		case who := <-started:
			if who != "B" {
				t.Fatalf("%s took over", who)
			}
		default:
			t.Fatalf("B has not taken over at %v, after A's lease expired at %v", clk.Now().Sub(t0), time.UnixMilli(last).Sub(t0))
		}
		if _, f, h := expiresAt(t, dbB, "loop:poller/main"); h != "B" || f != fence+1 {
			t.Fatalf("lease held by %s with fence %d, want B with %d", h, f, fence+1)
		}
		if m := most.Load(); m != 1 {
			t.Fatalf("%d fns ran at once", m)
		}
	})
}

// Orphan records a lease that does not exist as expired and unheld, so that ClaimExpired hands
// it out once; a lease that exists (held, or claimed) is left as it is.
func TestOrphan(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a, _ := manager(t, b, "A", clk)
		bm, _ := manager(t, b, "B", clk)
		acquire(t, a, "host:a")
		if missing, err := bm.Missing(ctx, []string{"host:a", "host:gone"}); err != nil || !slices.Equal(missing, []string{"host:gone"}) {
			t.Fatalf("missing %v, %v; want host:gone alone", missing, err)
		}
		if created, err := bm.Orphan(ctx, "host:a"); err != nil || created {
			t.Fatalf("orphan of a held lease: created %v, %v", created, err)
		}
		if created, err := bm.Orphan(ctx, "host:gone"); err != nil || !created {
			t.Fatalf("orphan of a missing lease: created %v, %v", created, err)
		}
		if created, err := a.Orphan(ctx, "host:gone"); err != nil || created {
			t.Fatalf("orphan twice: created %v, %v", created, err)
		}
		claims, err := bm.ClaimExpired(ctx, "host:", 10)
		if err != nil || len(claims) != 1 || claims[0].Name != "host:gone" {
			t.Fatalf("claims %+v, %v; want host:gone alone", claims, err)
		}
		if again, err := a.ClaimExpired(ctx, "host:", 10); err != nil || len(again) != 0 {
			t.Fatalf("claimed again: %+v, %v", again, err)
		}
		// A holder that is alive after all takes an orphaned lease back as any expired one.
		if created, err := bm.Orphan(ctx, "host:back"); err != nil || !created {
			t.Fatalf("orphan: %v, %v", created, err)
		}
		acquire(t, a, "host:back")
	})
}
