package session

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

var (
	stressScale = flag.Int("stress", 1, "scale factor for TestStressBoundaryInvariant (events and transitions)")
	stressSeed  = flag.Uint64("stress.seed", 0, "seed for TestStressBoundaryInvariant (0: random)")
)

// outcome of one stamped event.
type outcome struct {
	delivered  bool
	session    string // where it was appended
	reason     string // drop reason
	viaNonUser bool   // delivered to the key's current session under the non-user-end rule
	compressed bool   // work delivered although the key was compressed since it started
}

// TestStressBoundaryInvariant runs random transitions, spawns and deliveries on a few keys from
// many goroutines. Inside each delivery's boundary, just before the append, an independent
// checker reads the store with its own SQL and asserts:
//
//   - the target is the key's current conversation (the routed session or its compression
//     continuation): nothing is ever sent into a chat's past;
//   - the target is the stamped session or one of its compression descendants, with no user
//     boundary on the way — except the table's explicit rule "stamped session ended for a
//     non-user reason (idle, timeout, suspended, …) → deliver to the key's current session",
//     and unstamped events, which go by route;
//
// Some events are work a turn started (an answer, a notification turn), classified with
// ClassifyWork at the generation the work started at. The test keeps its own log of every
// generation bump and whether it was a compression, and asserts for them:
//
//   - no reply or notice of live work is dropped by compression: a superseded verdict needs a
//     bump since the work started that was not a compression;
//   - superseded work is never delivered: a deliverable verdict needs every bump since the work
//     started to be a compression;
//
// and at the end that every event was delivered exactly once (one original message in the
// recorded session) or recorded as dropped, and that the routing table is consistent.
func TestStressBoundaryInvariant(t *testing.T) {
	// SQLite: one kernel in a testing/synctest bubble (the sleeps of the idle auto-reset take no
	// time).
	t.Run("sqlite", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			stressBoundary(t, 800**stressScale, time.Sleep, func(opt Options) []*env {
				return []*env{newEnvOn(t, storetest.SQLite(t), opt)}
			})
		})
	})
	// PostgreSQL: two kernels, each with its own connection pool and PostgresLocker, share one
	// database as two hosts would, and the goroutines of every role use both, so the invariant
	// holds only if the boundary excludes across hosts. A bubble's fake clock does not advance
	// while goroutines wait on the network, so the hosts share a manual clock instead.
	t.Run("postgres", func(t *testing.T) {
		b := storetest.Postgres(t)
		clock := newManualClock(epoch)
		stressBoundary(t, 500**stressScale, clock.Sleep, func(opt Options) []*env {
			opt.Now = clock.Now
			return []*env{newEnvOn(t, b, opt), newEnvOn(t, b, opt)}
		})
	})
}

// manualClock is a clock that moves only when told to (Sleep), shared by the kernels of one test.
type manualClock struct{ ns atomic.Int64 }

func newManualClock(start time.Time) *manualClock {
	c := &manualClock{}
	c.ns.Store(start.UnixNano())
	return c
}

func (c *manualClock) Now() time.Time        { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) Sleep(d time.Duration) { c.ns.Add(int64(d)) }

// stressBoundary is TestStressBoundaryInvariant on the kernels open returns (one per host, all
// on one database): goroutine g of each role uses kernel g % len. sleep moves the kernels' clock.
func stressBoundary(t *testing.T, events int, sleep func(time.Duration), open func(Options) []*env) {
	seed := *stressSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -stress.seed=%d)", seed, seed)
	const nKeys, nUsers, nSpawners, nDeliverers = 4, 4, 2, 3

	var processLive atomic.Int32 // 0 none, 1 live, 2 error
	envs := open(Options{
		AutoReset: ResetPolicy{Mode: ResetIdle, IdleAfter: time.Hour},
		Processes: liveFunc(func(ctx context.Context, key string) (bool, error) {
			switch processLive.Load() {
			case 1:
				return true, nil
			case 2:
				return false, errors.New("registry unavailable")
			}
			return false, nil
		}),
	})
	for _, e := range envs {
		e.t = t
	}
	e := envs[0]
	kernel := func(g int) *Kernel { return envs[g%len(envs)].k }
	ctx := e.ctx
	srcs := make([]abi.Source, nKeys)
	keys := make([]string, nKeys)
	for i := range srcs {
		srcs[i] = dm(fmt.Sprintf("stress%d", i))
		keys[i] = e.key(srcs[i])
	}

	var (
		mu       sync.Mutex
		results  = map[int]outcome{}
		lastGen  = map[string]int64{}
		bumps    = map[string]map[int64]string{} // key → generation → "compression" or "other"
		nonUser  int
		across   int // work delivered across a compression
		ops      atomic.Int64
		stop     = make(chan struct{})
		evCh     = make(chan stressEvent, 64)
		failures atomic.Int32
	)
	fail := func(format string, args ...any) {
		if failures.Add(1) <= 10 {
			t.Errorf(format, args...)
		}
	}
	genOf := func(b *Boundary) int64 {
		g, err := b.Generation()
		if err != nil {
			if !errors.Is(err, ErrNoRoute) {
				fail("generation: %v", err)
			}
			return 0
		}
		return g
	}
	// checkGen runs under the key's lock after each operation: generations never go back, an
	// operation bumps at most once, and every bump is logged with whether it was a compression.
	checkGen := func(b *Boundary, before int64, compressed bool) {
		g := genOf(b)
		mu.Lock()
		defer mu.Unlock()
		if g < lastGen[b.Key()] {
			fail("generation of %s went back: %d after %d", b.Key(), g, lastGen[b.Key()])
		}
		lastGen[b.Key()] = g
		if g == before {
			return
		}
		if g != before+1 {
			fail("one operation moved %s from generation %d to %d", b.Key(), before, g)
		}
		kind := "other"
		if compressed {
			kind = "compression"
		}
		if bumps[b.Key()] == nil {
			bumps[b.Key()] = map[int64]string{}
		}
		bumps[b.Key()][g] = kind
	}
	// supersededSince is the oracle's answer: did a bump other than compression happen after
	// generation gen? The caller holds the key's lock, so the log is complete.
	supersededSince := func(key string, gen int64) bool {
		mu.Lock()
		defer mu.Unlock()
		for g, kind := range bumps[key] {
			if g > gen && kind != "compression" {
				return true
			}
		}
		return false
	}

	// Users: random transitions.
	var users sync.WaitGroup
	for u := range nUsers {
		users.Add(1)
		go func() {
			defer users.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(u)+100))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(nKeys)
				err := kernel(u).WithBoundary(ctx, keys[i], func(b *Boundary) error {
					before, compressed := genOf(b), false
					defer func() { checkGen(b, before, compressed) }()
					var err error
					switch op := rng.IntN(100); {
					case op < 30:
						_, err = b.Resolve(srcs[i], ResolveOptions{})
					case op < 40:
						_, err = b.Reset(fmt.Sprintf("t%d", rng.IntN(3)))
					case op < 50:
						target := randomSession(ctx, e.db, keys[i], rng)
						if target != "" && rng.IntN(4) == 0 {
							target = fmt.Sprintf("t%d", rng.IntN(3)) // by title
						}
						if target != "" {
							_, err = b.Resume(target)
						}
					case op < 57:
						_, err = b.Branch("")
					case op < 67:
						_, err = b.Stop()
					case op < 80:
						var r Route
						var ok bool
						if r, ok, err = b.Current(); ok && err == nil {
							_, err = b.Compress(r.SessionID, "summary")
							compressed = err == nil
						}
					case op < 84:
						_, err = b.Suspend()
					case op < 90:
						if r, ok, cerr := b.Current(); ok && cerr == nil {
							reasons := []string{EndAgentClose, EndTimeout, EndUserExit, EndWSOrphan}
							err = b.End(r.SessionID, reasons[rng.IntN(len(reasons))])
						}
					case op < 95:
						sleep(time.Duration(rng.IntN(90)) * time.Minute)
						processLive.Store(int32(rng.IntN(3)))
					default:
						_, err = b.Redact(fmt.Sprintf("pm%d", rng.IntN(50)))
					}
					if errors.Is(err, ErrNoRoute) || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
						err = nil // e.g. compressing an ended session, resuming a title not used yet
					}
					return err
				})
				if err != nil {
					fail("transition: %v", err)
				}
				ops.Add(1)
				runtime.Gosched()
			}
		}()
	}

	// Spawners: stamp work in the current session (or, sometimes, leave it unstamped).
	var spawners sync.WaitGroup
	var nextID atomic.Int64
	for sp := range nSpawners {
		spawners.Add(1)
		go func() {
			defer spawners.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(sp)+200))
			for nextID.Load() < int64(events) {
				i := rng.IntN(nKeys)
				var ev stressEvent
				err := kernel(sp).WithBoundary(ctx, keys[i], func(b *Boundary) error {
					before := genOf(b)
					defer func() { checkGen(b, before, false) }()
					if _, err := b.Resolve(srcs[i], ResolveOptions{Internal: true}); err != nil {
						return err
					}
					if _, err := b.Append(must2(b.Current()).SessionID, Message{Text: "spawn", PlatformMessageID: fmt.Sprintf("pm%d", rng.IntN(50))}); err != nil {
						return err
					}
					s, err := b.Stamp(srcs[i])
					ev = stressEvent{stamp: s}
					return err
				})
				if err != nil {
					fail("spawn: %v", err)
					continue
				}
				id := int(nextID.Add(1))
				if id > events {
					break
				}
				ev.id = id
				switch rng.IntN(20) {
				case 0:
					ev.stamp = Stamp{Key: ev.stamp.Key, Route: ev.stamp.Route} // legacy, unstamped
				case 1, 2, 3, 4, 5, 6:
					ev.work = true // a turn's answer: started at the stamp's generation
				}
				evCh <- ev
			}
		}()
	}
	go func() { spawners.Wait(); close(evCh) }()

	// Deliverers: pre-flight, then the authoritative check-and-send inside the boundary.
	var deliverers sync.WaitGroup
	for d := range nDeliverers {
		deliverers.Add(1)
		go func() {
			defer deliverers.Done()
			k := kernel(d + 1) // not the spawner's kernel, when there are two
			for ev := range evCh {
				_ = k.Classify(ctx, ev.stamp) // pre-flight: advisory only
				var out outcome
				for attempt := 0; ; attempt++ {
					var v Verdict
					superseded, compressedSince := false, false
					err := k.WithBoundary(ctx, ev.stamp.Key, func(b *Boundary) error {
						if !ev.work {
							v = b.Classify(ev.stamp)
						} else {
							v = b.ClassifyWork(ev.stamp, ev.stamp.Generation)
							superseded = supersededSince(ev.stamp.Key, ev.stamp.Generation)
							compressedSince = genOf(b) != ev.stamp.Generation
							switch {
							case v.Reason == ReasonSuperseded && !superseded:
								fail("work %d %+v dropped by compression alone: %v", ev.id, ev.stamp, v)
							case v.Deliverable() && superseded:
								fail("work %d %+v delivered although superseded: %v", ev.id, ev.stamp, v)
							}
						}
						if !v.Deliverable() {
							return nil
						}
						if v.SessionID == "" {
							return fmt.Errorf("deliverable verdict without a session: %v", v)
						}
						if msg := checkTarget(ctx, e.db, ev.stamp, v.SessionID); msg != "" {
							fail("event %d %+v: %v: %s", ev.id, ev.stamp, v, msg)
						}
						_, err := b.Append(v.SessionID, Message{Role: "notification", Text: fmt.Sprintf("evt-%d", ev.id)})
						return err
					})
					if err != nil {
						fail("deliver: %v", err)
					}
					if v.Deliverable() {
						out = outcome{delivered: true, session: v.SessionID, viaNonUser: v.Reason == ReasonEndedNonUser,
							compressed: ev.work && compressedSince}
						break
					}
					if v.Kind == Stale || attempt == 2 {
						out = outcome{reason: v.Kind.String() + ":" + v.Reason}
						break
					}
					runtime.Gosched() // unverifiable: retry (the watcher backs off here)
				}
				mu.Lock()
				if _, dup := results[ev.id]; dup {
					fail("event %d handled twice", ev.id)
				}
				results[ev.id] = out
				if out.viaNonUser {
					nonUser++
				}
				if out.compressed {
					across++
				}
				mu.Unlock()
			}
		}()
	}
	deliverers.Wait()
	close(stop)
	users.Wait()

	// Every event ended delivered or recorded as dropped, and each delivery is in the store
	// exactly once, in the recorded session.
	if len(results) != events {
		t.Fatalf("%d events accounted for, want %d", len(results), events)
	}
	where := map[string][]string{}
	rows, err := e.db.Query(`SELECT text, session_id FROM session_messages WHERE role = 'notification' AND copied_from IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var text, sid string
		rows.Scan(&text, &sid)
		where[text] = append(where[text], sid)
	}
	rows.Close()
	counts := map[string]int{}
	for id, out := range results {
		got := where[fmt.Sprintf("evt-%d", id)]
		if !out.delivered {
			counts["dropped "+out.reason]++
			if len(got) != 0 {
				fail("dropped event %d is in %v", id, got)
			}
			continue
		}
		counts["delivered"]++
		if len(got) != 1 || got[0] != out.session {
			fail("delivered event %d to %s, store has it in %v", id, out.session, got)
		}
	}
	checkRoutingConsistent(t, e.db)
	t.Logf("%d events, %d transitions: %v (%d to the current session after a non-user end, %d work across a compression)",
		events, ops.Load(), counts, nonUser, across)
	if counts["delivered"] == 0 || len(counts) < 3 || counts["dropped stale:"+ReasonSuperseded] == 0 {
		t.Errorf("the stress mix did not exercise delivery and drops: %v", counts)
	}
	if across == 0 {
		t.Errorf("no work was delivered across a compression: the mix did not exercise it")
	}
}

type stressEvent struct {
	id    int
	stamp Stamp
	work  bool // classified as work started at stamp.Generation
}

func must2[T any](v T, _ bool, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func randomSession(ctx context.Context, db *sql.DB, key string, rng *rand.Rand) string {
	rows, err := db.QueryContext(ctx, `SELECT id FROM sessions WHERE session_key = $1`, key)
	if err != nil {
		return ""
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return ""
	}
	return ids[rng.IntN(len(ids))]
}

type chkRow struct {
	id, parent, createdBy, reason string
	ended                         bool
}

// checkTarget is the independent oracle: it reads the committed state with its own SQL (the
// caller holds the key's boundary, so nothing changes underneath) and returns "" if appending
// s's event to target keeps the invariant.
func checkTarget(ctx context.Context, db *sql.DB, s Stamp, target string) string {
	rows, err := db.QueryContext(ctx, `SELECT id, COALESCE(parent_session_id, ''), created_by,
		ended_at IS NOT NULL, COALESCE(end_reason, '') FROM sessions WHERE session_key = $1`, s.Key)
	if err != nil {
		return "oracle: " + err.Error()
	}
	byID := map[string]chkRow{}
	children := map[string][]string{} // compression children only
	for rows.Next() {
		var r chkRow
		rows.Scan(&r.id, &r.parent, &r.createdBy, &r.ended, &r.reason)
		byID[r.id] = r
		if r.createdBy == createdCompression {
			children[r.parent] = append(children[r.parent], r.id)
		}
	}
	rows.Close()
	var routed string
	if err := db.QueryRowContext(ctx, `SELECT session_id FROM session_routes WHERE session_key = $1`, s.Key).Scan(&routed); err != nil {
		return "oracle: route: " + err.Error()
	}
	// descends reports whether to is from, or reached from it through compression children
	// whose parents all ended by compression.
	var descends func(from, to string, depth int) bool
	descends = func(from, to string, depth int) bool {
		if from == to {
			return true
		}
		if depth > 200 || byID[from].reason != EndCompression || !byID[from].ended {
			return false
		}
		for _, c := range children[from] {
			if descends(c, to, depth+1) {
				return true
			}
		}
		return false
	}
	t := byID[target]
	if t.id == "" {
		return "target is not a session of the key"
	}
	if !descends(routed, target, 0) {
		return fmt.Sprintf("target is not the chat's current conversation (route on %s)", routed)
	}
	if t.ended && (UserBoundary(t.reason) || t.reason == EndCompression) {
		// Only a routed row awaiting reopen or replacement (a non-user end) may be ended.
		return "target ended " + t.reason
	}
	if !s.Stamped() {
		return ""
	}
	if descends(s.SessionID, target, 0) {
		return ""
	}
	// The one exception: the stamped conversation ended for a non-user reason.
	p := byID[s.SessionID]
	if p.ended && p.reason != EndCompression && !UserBoundary(p.reason) {
		return ""
	}
	return fmt.Sprintf("stamped %s (ended=%v %q) does not lead to %s", s.SessionID, p.ended, p.reason, target)
}

// checkRoutingConsistent asserts the routing table's invariants after the run.
func checkRoutingConsistent(t *testing.T, db *sql.DB) {
	t.Helper()
	var bad int
	db.QueryRow(`SELECT COUNT(*) FROM session_routes r LEFT JOIN sessions s ON s.id = r.session_id
		WHERE s.id IS NULL OR s.session_key != r.session_key OR s.end_reason = 'compression'`).Scan(&bad)
	if bad != 0 {
		t.Errorf("%d routes point at a missing, foreign or compression-ended session", bad)
	}
	var orphans int
	db.QueryRow(`SELECT COUNT(*) FROM sessions c WHERE c.created_by = 'compression' AND NOT EXISTS
		(SELECT 1 FROM sessions p WHERE p.id = c.parent_session_id AND p.session_key = c.session_key)`).Scan(&orphans)
	if orphans != 0 {
		t.Errorf("%d compression children without a parent of the same key", orphans)
	}
	var live int
	db.QueryRow(`SELECT COUNT(*) FROM sessions s WHERE s.ended_at IS NULL AND NOT EXISTS
		(SELECT 1 FROM session_routes r WHERE r.session_id = s.id)`).Scan(&live)
	if live != 0 {
		t.Errorf("%d live sessions are not routed (a transition forgot to end one)", live)
	}
}
