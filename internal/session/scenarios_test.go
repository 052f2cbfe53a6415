package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// Scenario numbers refer to hermes-gateway.md §7; each test covers the kernel's part.

// 1: spawned in S1, /new, the process exits: dropped as stale, nothing reaches S2, and S1's
// transcript is untouched.
func TestScenario01StaleAfterNew(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		src := dm("1")
		s := e.stamp(src)
		e.exec(`INSERT INTO session_messages (session_id, role, text, created_at) VALUES ($1, 'user', 'run it', 0)`, s.SessionID)
		r2 := e.r(e.k.Reset(e.ctx, s.Key, ""))
		if pre := e.k.Classify(e.ctx, s); pre.Kind != Stale {
			t.Fatalf("pre-flight %v", pre)
		}
		v := e.deliver(s, "done")
		if v.Kind != Stale || v.Reason != ReasonUserBoundary {
			t.Fatalf("verdict %v", v)
		}
		if m := e.transcript(r2.SessionID); len(m) != 0 {
			t.Fatalf("S2 got %v", m)
		}
		if m := e.transcript(s.SessionID); len(m) != 1 {
			t.Fatalf("S1 transcript %v", m)
		}
		if s1 := e.session(s.SessionID); s1.EndReason != EndReset || s1.Live() {
			t.Fatalf("S1 %+v", s1)
		}
		if s2 := e.session(r2.SessionID); s2.ParentID != s.SessionID || r2.Generation <= s.Generation {
			t.Fatalf("S2 %+v, route %+v", s2, r2)
		}
	})
}

// 2: S1 ended for a non-user reason: delivered to the chat's current session.
func TestScenario02NonUserEndDeliversToCurrent(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		for _, reason := range []string{EndIdle, EndDaily, EndAgentClose, EndTimeout, EndCronDone, ""} {
			t.Run(reason, func(t *testing.T) {
				e := newEnv(t, Options{})
				e.t = t
				src := dm("2")
				s := e.stamp(src)
				if err := e.k.EndSession(e.ctx, s.SessionID, reason); err != nil {
					t.Fatal(err)
				}
				cur := e.resolve(src) // the user writes again: reopened (agent_close) or replaced
				v := e.deliver(s, "done")
				if !v.Deliverable() || v.SessionID != cur.SessionID {
					t.Fatalf("verdict %v; current %s", v, cur.SessionID)
				}
				if m := e.transcript(cur.SessionID); len(m) != 1 || m[0].Text != "done" {
					t.Fatalf("current transcript %v", m)
				}
			})
		}
	})
}

// 3: S1 ended by compression, tip S1' live: delivered whether the route is on S1 or S1'; a
// route still on S1 is advanced to S1' (generation unchanged).
func TestScenario03CompressionContinuation(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		src := dm("3")
		s := e.stamp(src)
		r := e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, "summary of S1"))
		if v := e.deliver(s, "one"); v.Kind != DeliverContinuation || v.SessionID != r.SessionID {
			t.Fatalf("route on tip: %v", v)
		}
		// A route left on S1 (a two-phase writer stopped between "child written" and "repoint").
		e.exec(`UPDATE session_routes SET session_id = $1 WHERE session_key = $2`, s.SessionID, s.Key)
		e.k.cache.drop(s.Key)
		if v := e.deliver(s, "two"); v.Kind != DeliverContinuation || v.SessionID != r.SessionID {
			t.Fatalf("route on parent: %v", v)
		}
		cur := e.current(s.Key)
		if cur.SessionID != r.SessionID || cur.Generation != r.Generation {
			t.Fatalf("route not advanced: %+v want %+v", cur, r)
		}
		m := e.transcript(r.SessionID)
		if len(m) != 3 || m[0].Role != "system" || m[1].Text != "one" || m[2].Text != "two" {
			t.Fatalf("S1' transcript %v", m)
		}
		if len(e.transcript(s.SessionID)) != 0 {
			t.Fatal("delivered into the compressed parent")
		}
	})
}

// 4: the tip is not visible yet (tip == S1): unverifiable (retry), nothing dropped silently and
// nothing delivered; once the continuation appears the retry delivers. A tip the user ended
// (/new after the compression) is final here (compression is one transaction): stale.
func TestScenario04CompressionNotVisible(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		src := dm("4")
		s := e.stamp(src)
		// Phase one of a compression by a two-phase writer: the parent ended, no child yet.
		e.exec(`UPDATE sessions SET ended_at = 5, end_reason = 'compression' WHERE id = $1`, s.SessionID)
		e.k.cache.drop(s.Key)
		if v := e.deliver(s, "x"); v.Kind != Unverifiable || v.Reason != ReasonCompressInFlight {
			t.Fatalf("in flight: %v", v)
		}
		// Phase two: the child appears (the route is still on the parent).
		child := NewSessionID(time.Now())
		e.exec(`INSERT INTO sessions (id, session_key, parent_session_id, created_by, started_at, origin)
		VALUES ($1, $2, $3, 'compression', 6, '{}')`, child, s.Key, s.SessionID)
		if v := e.deliver(s, "retried"); v.Kind != DeliverContinuation || v.SessionID != child {
			t.Fatalf("after the child appeared: %v", v)
		}
		// Tip ended by the user: compress again, then /new ends the tip.
		s2 := e.stamp(src)
		e.r(e.k.Compress(e.ctx, s2.Key, s2.SessionID, ""))
		after := e.r(e.k.Reset(e.ctx, s2.Key, ""))
		if v := e.deliver(s2, "y"); v.Kind != Stale || v.Reason != ReasonUserBoundary {
			t.Fatalf("tip ended: %v", v)
		}
		if len(e.transcript(after.SessionID)) != 0 {
			t.Fatal("delivered into the reset session")
		}
	})
}

// 5: the store is unavailable: unverifiable, never delivery.
func TestScenario05StoreUnavailable(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{CacheSize: -1})
		e.t = t
		s := e.stamp(dm("5"))
		e.k.Close()
		e.db.Close()
		if v := e.k.Classify(e.ctx, s); v.Kind != Unverifiable || v.Reason != ReasonStore || v.Err == nil {
			t.Fatalf("pre-flight %v", v)
		}
		var v Verdict
		ran := false
		err := e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error { ran = true; v = b.Classify(s); return nil })
		switch {
		case e.backend.Name == "postgres":
			// The boundary lock lives in the database: without it there is no boundary at all.
			if err == nil || ran {
				t.Fatalf("boundary taken on a closed database (err %v)", err)
			}
		case err != nil:
			t.Fatal(err)
		case v.Kind != Unverifiable || v.Reason != ReasonStore:
			t.Fatalf("boundary %v", v)
		}
		if v := e.k.Classify(e.ctx, Stamp{Key: s.Key}); v.Kind != Unverifiable {
			t.Fatalf("unstamped on a dead store: %v", v)
		}
	})
}

// 6: an unstamped (legacy) completion goes to the key's current session, unchanged.
func TestScenario06Unstamped(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		src := dm("6")
		old := e.stamp(src)
		cur := e.r(e.k.Reset(e.ctx, old.Key, ""))
		v := e.deliver(Stamp{Key: old.Key, Route: src}, "legacy")
		if v.Kind != DeliverCurrent || v.SessionID != cur.SessionID || v.Reason != ReasonUnstamped {
			t.Fatalf("verdict %v", v)
		}
		// A key with no session yet: deliver, after resolving one from the route.
		v = e.k.Classify(e.ctx, Stamp{Key: e.key(dm("66"))})
		if v.Kind != DeliverCurrent || v.SessionID != "" {
			t.Fatalf("no session yet: %v", v)
		}
	})
}

// 7: spawned from Telegram topic 42 while the user now chats in topic 7: the route comes from
// the store origin of the process's key (topic 42, original user), never the foreground event.
func TestScenario07RouteFromStoreOrigin(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		topic42 := abi.Source{Platform: "telegram", ChatType: abi.ChatForum, ChatID: "-1001", ThreadID: "42", UserID: "alice", MessageID: "m1"}
		topic7 := abi.Source{Platform: "telegram", ChatType: abi.ChatForum, ChatID: "-1001", ThreadID: "7", UserID: "bob", MessageID: "m9"}
		s := e.stamp(topic42)
		fg := e.resolve(topic7)
		route, err := e.k.RouteSource(e.ctx, s.Key)
		if err != nil {
			t.Fatal(err)
		}
		if route.ThreadID != "42" || route.UserID != "alice" || route.ChatID != "-1001" {
			t.Fatalf("route %+v", route)
		}
		if err := e.k.VerifyRoute(s, route); err != nil {
			t.Fatal(err)
		}
		v := e.deliver(s, "done")
		if v.SessionID != s.SessionID || len(e.transcript(fg.SessionID)) != 0 {
			t.Fatalf("verdict %v; topic 7 got a message", v)
		}
		// A key with no session: the route is parsed from the key.
		k := e.key(abi.Source{Platform: "telegram", ChatType: abi.ChatThread, ChatID: "5", ThreadID: "9"})
		if r, err := e.k.RouteSource(e.ctx, k); err != nil || r.ThreadID != "9" || r.ChatID != "5" {
			t.Fatalf("parsed route %+v, %v", r, err)
		}
	})
}

// 8: the stamp says key K but the recovered source derives K': dropped.
func TestScenario08KeyMismatch(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		dmSrc := abi.Source{Platform: "telegram", ChatType: abi.ChatDM, ChatID: "8", UserID: "8"}
		s := e.stamp(dmSrc)
		group := abi.Source{Platform: "telegram", ChatType: abi.ChatGroup, ChatID: "-8", UserID: "8"}
		if err := e.k.VerifyRoute(s, group); !errors.Is(err, ErrKeyMismatch) {
			t.Fatalf("VerifyRoute = %v", err)
		}
		// Classifying a stamp inside another key's boundary is stale too.
		other := e.key(group)
		var v Verdict
		e.k.WithBoundary(e.ctx, other, func(b *Boundary) error { v = b.Classify(s); return nil })
		if v.Kind != Stale || v.Reason != ReasonKeyMismatch {
			t.Fatalf("verdict %v", v)
		}
	})
}

// 9: a pinned internal wake (a synthetic turn) with /stop or /new bumping the generation during
// resolution, or the compare-and-set failing: dropped, and the route is not switched. A plain
// completion after /stop is still delivered (same session).
func TestScenario09GenerationAndCAS(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		src := dm("9")
		s := e.stamp(src)
		var gen int64
		e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error {
			v := b.Classify(s)
			gen = v.Generation // the synthetic turn starts here
			return nil
		})
		e.r(e.k.Stop(e.ctx, s.Key))
		var work, plain Verdict
		var cerr error
		e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error {
			work = b.ClassifyWork(s, gen)
			plain = b.Classify(s)
			cerr = b.CheckGeneration(gen)
			return nil
		})
		if work.Kind != Stale || work.Reason != ReasonSuperseded {
			t.Fatalf("synthetic turn after /stop: %v", work)
		}
		if !errors.Is(cerr, ErrSuperseded) {
			t.Fatalf("CheckGeneration = %v", cerr)
		}
		if plain.Kind != Deliver || plain.SessionID != s.SessionID {
			t.Fatalf("completion after /stop: %v", plain)
		}
		// /new during the turn.
		gen = plain.Generation
		e.r(e.k.Reset(e.ctx, s.Key, ""))
		e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error { work = b.ClassifyWork(s, gen); return nil })
		if work.Kind != Stale {
			t.Fatalf("after /new: %v", work)
		}
		// CAS failure: advancing from a session that is not current changes nothing.
		before := e.current(s.Key)
		if _, err := e.k.Compress(e.ctx, s.Key, s.SessionID, ""); !errors.Is(err, ErrConflict) {
			t.Fatalf("Compress with a stale expectation = %v", err)
		}
		if after := e.current(s.Key); after != before {
			t.Fatalf("route switched: %+v -> %+v", before, after)
		}
	})
}

// 26: a routed row ended agent_close / ws_orphan_reap is reopened with the same id; other end
// reasons get a new session.
func TestScenario26RoutedRowEnded(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		for _, c := range []struct {
			reason string
			reopen bool
		}{{EndAgentClose, true}, {EndWSOrphan, true}, {EndTimeout, false}, {EndCronDone, false}, {EndUserExit, false}, {"", false}} {
			t.Run(c.reason, func(t *testing.T) {
				e := newEnv(t, Options{})
				e.t = t
				src := dm("26")
				first := e.resolve(src)
				if err := e.k.EndSession(e.ctx, first.SessionID, c.reason); err != nil {
					t.Fatal(err)
				}
				next := e.resolve(src)
				if c.reopen {
					if !next.Reopened || next.SessionID != first.SessionID || !e.session(first.SessionID).Live() {
						t.Fatalf("not reopened: %+v", next)
					}
					return
				}
				if !next.Created || next.SessionID == first.SessionID || next.PreviousID != first.SessionID || next.Reason != c.reason {
					t.Fatalf("not replaced: %+v", next)
				}
				if s := e.session(next.SessionID); s.ParentID != first.SessionID {
					t.Fatalf("new row %+v", s)
				}
				if s := e.session(first.SessionID); s.EndReason != c.reason {
					t.Fatalf("old row's end reason rewritten: %+v", s)
				}
			})
		}
	})
}

// 27: an entry on a compression parent is healed to the tip on lookup, updated_at unchanged;
// concurrent ForceNew for one key creates exactly one row.
func TestScenario27HealAndForceNew(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		inBubble(t, func(t *testing.T) {
			e := newEnv(t, Options{})
			e.t = t
			src := dm("27")
			first := e.resolve(src)
			tip := e.r(e.k.Compress(e.ctx, first.Key, first.SessionID, ""))
			e.exec(`UPDATE session_routes SET session_id = $1 WHERE session_key = $2`, first.SessionID, first.Key)
			e.k.cache.drop(first.Key)
			var upd0, upd1 int64
			e.db.QueryRow(`SELECT updated_at FROM session_routes WHERE session_key = $1`, first.Key).Scan(&upd0)
			time.Sleep(time.Minute)
			r, err := e.k.Resolve(e.ctx, src, ResolveOptions{Internal: true})
			if err != nil || !r.Healed || r.SessionID != tip.SessionID || r.Generation != tip.Generation {
				t.Fatalf("heal: %+v, %v (tip %+v)", r, err, tip)
			}
			e.db.QueryRow(`SELECT updated_at FROM session_routes WHERE session_key = $1`, first.Key).Scan(&upd1)
			if upd0 != upd1 {
				t.Fatalf("updated_at moved %d -> %d", upd0, upd1)
			}

			// Concurrent ForceNew through Kernel.Resolve: hold the key so all callers pile up.
			var before int
			e.db.QueryRow(`SELECT COUNT(*) FROM sessions WHERE session_key = $1`, first.Key).Scan(&before)
			const n = 8
			hold := make(chan struct{})
			held := make(chan struct{})
			go e.k.WithBoundary(e.ctx, first.Key, func(*Boundary) error { close(held); <-hold; return nil })
			<-held
			var wg sync.WaitGroup
			results := make([]Resolution, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i], _ = e.k.Resolve(e.ctx, src, ResolveOptions{ForceNew: true})
				}()
			}
			fk := forceKey(first.Key)
			waitFor(t, "callers joining the flight", func() bool { return e.k.flights.joined(fk) == n-1 })
			close(hold)
			wg.Wait()
			var after int
			e.db.QueryRow(`SELECT COUNT(*) FROM sessions WHERE session_key = $1`, first.Key).Scan(&after)
			if after != before+1 {
				t.Fatalf("ForceNew x%d created %d rows", n, after-before)
			}
			for _, r := range results {
				if r.SessionID != results[0].SessionID || !r.Created {
					t.Fatalf("callers disagree: %+v vs %+v", r, results[0])
				}
			}
		})
	})
}

func forceKey(key string) string { return key + "\x00falsetruefalse" }

// 28: a suspended entry: the next message creates a new session (reason suspended) and the old
// row ends.
func TestScenario28Suspended(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		src := dm("28")
		first := e.resolve(src)
		sus := e.r(e.k.Suspend(e.ctx, first.Key))
		if sus.SessionID != first.SessionID || sus.Generation != first.Generation+1 {
			t.Fatalf("suspend %+v", sus)
		}
		next := e.resolve(src)
		if !next.Created || next.Reason != EndSuspended || next.PreviousID != first.SessionID || next.Generation != sus.Generation+1 {
			t.Fatalf("next %+v", next)
		}
		if s := e.session(first.SessionID); s.EndReason != EndSuspended {
			t.Fatalf("old row %+v", s)
		}
		if again := e.resolve(src); again.Created || again.SessionID != next.SessionID {
			t.Fatalf("suspension not cleared: %+v", again)
		}
	})
}

type liveFunc func(ctx context.Context, key string) (bool, error)

func (f liveFunc) HasLiveProcess(ctx context.Context, key string) (bool, error) { return f(ctx, key) }

// Auto-reset is off by default, and a live background process (or an error asking) keeps the
// session.
func TestAutoReset(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		t.Run("off by default", func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				e := newEnv(t, Options{})
				e.t = t
				a := e.resolve(dm("ar"))
				time.Sleep(1000 * time.Hour)
				if b := e.resolve(dm("ar")); b.SessionID != a.SessionID {
					t.Fatal("time reset a session with auto-reset off")
				}
			})
		})
		for _, c := range []struct {
			name  string
			live  bool
			err   error
			reset bool
		}{{"no process", false, nil, true}, {"live process", true, nil, false}, {"check fails", false, errors.New("registry down"), false}} {
			t.Run(c.name, func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					var asked bool
					e := newEnv(t, Options{AutoReset: ResetPolicy{Mode: ResetIdle, IdleAfter: time.Hour},
						Processes: liveFunc(func(ctx context.Context, key string) (bool, error) {
							asked = true
							if !InBoundary(ctx) {
								t.Error("HasLiveProcess called outside the boundary")
							}
							return c.live, c.err
						})})
					e.t = t
					a := e.resolve(dm("ar"))
					time.Sleep(30 * time.Minute)
					if b := e.resolve(dm("ar")); b.SessionID != a.SessionID || asked {
						t.Fatalf("reset before the idle limit: %+v", b)
					}
					time.Sleep(61 * time.Minute)
					b := e.resolve(dm("ar"))
					if !asked || (b.SessionID != a.SessionID) != c.reset {
						t.Fatalf("asked=%v reset=%v, want reset=%v", asked, b.SessionID != a.SessionID, c.reset)
					}
					if c.reset && (b.Reason != EndIdle || e.session(a.SessionID).EndReason != EndIdle) {
						t.Fatalf("reason %+v", b)
					}
				})
			})
		}
		t.Run("daily boundary", func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				e := newEnv(t, Options{AutoReset: ResetPolicy{Mode: ResetDaily, AtHour: 10}})
				e.t = t
				a := e.resolve(dm("d")) // 08:05
				time.Sleep(time.Hour)
				if b := e.resolve(dm("d")); b.SessionID != a.SessionID {
					t.Fatal("reset before 10:00")
				}
				time.Sleep(time.Hour) // 10:05
				if b := e.resolve(dm("d")); b.SessionID == a.SessionID || b.Reason != EndDaily {
					t.Fatalf("no reset after 10:00: %+v", b)
				}
			})
		})
	})
}
