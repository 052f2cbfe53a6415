package loop

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/fakeclock"
	"github.com/hermes-host/hermes-host/internal/clock"
	"github.com/hermes-host/hermes-host/internal/inbound"
	"github.com/hermes-host/hermes-host/internal/lease"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// tape records, in one order across instances, which instance dispatched a polled event of
// which profile.
type tape struct {
	mu  sync.Mutex
	log []polled
}

type polled struct{ who, profile string }

func (t *tape) at(who string) inbound.Engine { return recorder{who, t} }

// from returns, for profile, who dispatched each of its events, in order.
func (t *tape) from(profile string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var who []string
	for _, e := range t.log {
		if e.profile == profile {
			who = append(who, e.who)
		}
	}
	return who
}

type recorder struct {
	who string
	t   *tape
}

func (r recorder) Dispatch(_ context.Context, _, profile string, _ abi.InboundEvent) (abi.DispatchReply, error) {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	r.t.log = append(r.t.log, polled{r.who, profile})
	return abi.DispatchReply{}, nil
}

// instance is one host's supervisor with its own plugin runtime and database pool. The
// instances of a test share a compilation cache (cache), so only the first compiles the plugin.
type instance struct {
	sup *Supervisor
	db  *sql.DB
}

func newInstance(t *testing.T, who, wasm, cache string, b storetest.Backend, clk clock.Clock, tp *tape) *instance {
	t.Helper()
	dir := t.TempDir()
	if err := wasmbuild.CopyFile(wasm, filepath.Join(dir, "poller.wasm")); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	rt, err := plugin.New(plugin.Config{Dir: dir, CacheDir: cache, Logger: quiet, Plugins: map[string]plugin.Settings{"poller": {
		Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{}`), "second": json.RawMessage(`{}`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	rt.Scan(context.Background())
	db := b.Open(t)
	m, err := lease.New(context.Background(), db, who, leaseTTL, clk)
	if err != nil {
		t.Fatal(err)
	}
	m.Log = quiet
	sup := New(rt, &inbound.Door{Engine: tp.at(who), Gate: admitAll{}, Log: quiet}, quiet)
	sup.Leases = m
	t.Cleanup(sup.Stop)
	return &instance{sup: sup, db: db}
}

const leaseTTL = 30 * time.Second

// settle waits until n goroutines wait on clk for a time ahead: every renewal or attempt due
// at the clock's time has been made.
func settle(t *testing.T, clk *fakeclock.Clock, n int) {
	t.Helper()
	waitFor(t, "the lease holders and campaigners to wait on the clock", func() bool { return clk.Waiting() == n })
}

// exclusive fails unless profile's events came from the instances in order, each taking over
// from the one before and never polling again after it: one poller at a time.
func exclusive(t *testing.T, tp *tape, profile string, order ...string) {
	t.Helper()
	who := tp.from(profile)
	i := 0
	for _, w := range who {
		for i < len(order) && w != order[i] {
			i++
		}
		if i == len(order) {
			t.Fatalf("profile %s polled by %v, want runs of %v in that order", profile, who, order)
		}
	}
}

// Three instances over one database: each profile's poll loop runs in one at a time. A's
// instance loses its database (as if killed: no renewal, no release); B takes its loops over
// once the leases expire. B stops cleanly and releases; C takes over at once.
func TestLeasedPollLoopsRunInOneInstance(t *testing.T) {
	wasm, err := wasmbuild.BuildWith("testdata/poller", "-X main.mode=paced")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
		tp := &tape{}
		profiles := []string{"main", "second"}
		polledBy := func(who string, n int) func() bool {
			return func() bool {
				for _, p := range profiles {
					c := 0
					for _, w := range tp.from(p) {
						if w == who {
							c++
						}
					}
					if c < n {
						return false
					}
				}
				return true
			}
		}

		a := newInstance(t, "A", wasm, cache, b, clk, tp)
		a.sup.Reconcile(context.Background())
		waitFor(t, "A to poll both profiles", polledBy("A", 2))
		bi := newInstance(t, "B", wasm, cache, b, clk, tp)
		bi.sup.Reconcile(context.Background())
		settle(t, clk, 4) // A's two renewers, B's two campaigns
		for range 3 {
			clk.Advance(leaseTTL / 3)
			settle(t, clk, 4)
		}
		waitFor(t, "A to poll more", polledBy("A", 6))
		for _, p := range profiles {
			exclusive(t, tp, p, "A")
		}

		a.db.Close() // A is cut off: its renewals fail, its loops stop, nothing is released
		// A stops at the first step; its leases run out at the third (expiring is not
		// expired) and B takes them at the fourth.
		for range 4 {
			clk.Advance(leaseTTL / 3)
			settle(t, clk, 4)
		}
		waitFor(t, "B to take over both profiles", polledBy("B", 2))
		for _, p := range profiles {
			exclusive(t, tp, p, "A", "B")
		}

		c := newInstance(t, "C", wasm, cache, b, clk, tp)
		c.sup.Reconcile(context.Background())
		settle(t, clk, 6) // A's and C's campaigns, B's renewers
		bi.sup.Stop()     // releases B's leases
		settle(t, clk, 4)
		clk.Advance(leaseTTL / 3) // C's next attempt finds them free: no expiry to wait for
		settle(t, clk, 4)
		waitFor(t, "C to take over both profiles", polledBy("C", 2))
		for _, p := range profiles {
			exclusive(t, tp, p, "A", "B", "C")
		}
		t.Logf("events per profile: main %d, second %d", len(tp.from("main")), len(tp.from("second")))
	})
}
