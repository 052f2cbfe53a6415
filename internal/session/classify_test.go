package session

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// TestClassificationTable covers every row of ARCHITECTURE.md §3 (and the finer pre-flight
// rules of hermes-gateway.md §3), each through both the pre-flight and the in-boundary path.
func TestClassificationTable(t *testing.T) {
	type setup func(e *env) (s Stamp, wantSession string)
	src := dm("100")
	cases := []struct {
		name   string
		opt    Options
		setup  setup
		kind   VerdictKind
		reason string
	}{
		{"current is the stamped session", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			return s, s.SessionID
		}, Deliver, ""},
		{"compression tip is the current session", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			r := e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, "summary"))
			return s, r.SessionID
		}, DeliverContinuation, ""},
		{"two compressions deep", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			r := e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
			r = e.r(e.k.Compress(e.ctx, s.Key, r.SessionID, ""))
			return s, r.SessionID
		}, DeliverContinuation, ""},
		{"user boundary: /new", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			e.r(e.k.Reset(e.ctx, s.Key, ""))
			return s, ""
		}, Stale, ReasonUserBoundary},
		{"user boundary: /resume", Options{}, func(e *env) (Stamp, string) {
			old := e.stamp(src)
			e.r(e.k.Reset(e.ctx, old.Key, "")) // old ends session_reset
			s := e.stamp(src)
			e.r(e.k.Resume(e.ctx, s.Key, old.SessionID)) // s ends session_switch
			return s, ""
		}, Stale, ReasonUserBoundary},
		{"user boundary: /branch", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			e.r(e.k.Branch(e.ctx, s.Key, "b"))
			return s, ""
		}, Stale, ReasonUserBoundary},
		{"user boundary: user_exit", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			if err := e.k.EndSession(e.ctx, s.SessionID, EndUserExit); err != nil {
				e.t.Fatal(err)
			}
			return s, ""
		}, Stale, ReasonUserBoundary},
		{"user boundary: new_session, then replaced", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			if err := e.k.EndSession(e.ctx, s.SessionID, EndNewSession); err != nil {
				e.t.Fatal(err)
			}
			e.resolve(src)
			return s, ""
		}, Stale, ReasonUserBoundary},
		{"key points at a session not descended by compression", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			other := e.stamp(dm("200"))
			// Another writer (or an older host) repointed the key without ending s.
			e.exec(`UPDATE sessions SET session_key = $1 WHERE id = $2`, s.Key, other.SessionID)
			e.exec(`UPDATE session_routes SET session_id = $1 WHERE session_key = $2`, other.SessionID, s.Key)
			e.k.cache.drop(s.Key)
			return s, ""
		}, Stale, ReasonMoved},
		{"compressed, but the key moved to an unrelated session", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
			other := e.stamp(dm("200"))
			e.exec(`UPDATE sessions SET session_key = $1 WHERE id = $2`, s.Key, other.SessionID)
			e.exec(`UPDATE session_routes SET session_id = $1 WHERE session_key = $2`, other.SessionID, s.Key)
			e.k.cache.drop(s.Key)
			return s, ""
		}, Stale, ReasonMoved},
		{"stamped session belongs to another key", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			other := e.stamp(dm("200"))
			s.SessionID = other.SessionID
			return s, ""
		}, Stale, ReasonKeyMismatch},
		{"stamp of another profile", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			s.Profile = "work"
			return s, ""
		}, Stale, ReasonKeyMismatch},
		{"non-user end: idle", Options{AutoReset: ResetPolicy{Mode: ResetIdle, IdleAfter: time.Hour}}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			time.Sleep(2 * time.Hour)
			r := e.resolve(src)
			if !r.Created || r.Reason != EndIdle {
				e.t.Fatalf("no idle reset: %+v", r)
			}
			return s, r.SessionID
		}, DeliverCurrent, ReasonEndedNonUser},
		{"non-user end: daily", Options{AutoReset: ResetPolicy{Mode: ResetDaily, AtHour: 4}}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			time.Sleep(24 * time.Hour)
			r := e.resolve(src)
			if !r.Created || r.Reason != EndDaily {
				e.t.Fatalf("no daily reset: %+v", r)
			}
			return s, r.SessionID
		}, DeliverCurrent, ReasonEndedNonUser},
		{"non-user end: timeout, replaced", Options{}, endThenResolve(src, EndTimeout), DeliverCurrent, ReasonEndedNonUser},
		{"non-user end: cron_complete, replaced", Options{}, endThenResolve(src, EndCronDone), DeliverCurrent, ReasonEndedNonUser},
		{"non-user end: empty reason, replaced", Options{}, endThenResolve(src, ""), DeliverCurrent, ReasonEndedNonUser},
		{"non-user end: suspended, replaced", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			e.r(e.k.Suspend(e.ctx, s.Key))
			r := e.resolve(src)
			return s, r.SessionID
		}, DeliverCurrent, ReasonEndedNonUser},
		{"non-user end, then the continuation was compressed", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			if err := e.k.EndSession(e.ctx, s.SessionID, EndTimeout); err != nil {
				e.t.Fatal(err)
			}
			r := e.resolve(src)
			r2 := e.r(e.k.Compress(e.ctx, s.Key, r.SessionID, ""))
			return s, r2.SessionID
		}, DeliverCurrent, ReasonEndedNonUser},
		{"agent_close while routed: still the current session", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			if err := e.k.EndSession(e.ctx, s.SessionID, EndAgentClose); err != nil {
				e.t.Fatal(err)
			}
			return s, s.SessionID
		}, Deliver, ""},
		{"unverifiable: stamped row missing", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			s.SessionID = "20200101_000000_deadbeef"
			return s, ""
		}, Unverifiable, ReasonSessionMissing},
		{"unverifiable: compression in flight (tip == stamped)", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			e.exec(`UPDATE sessions SET ended_at = 1, end_reason = 'compression' WHERE id = $1`, s.SessionID)
			e.k.cache.drop(s.Key)
			return s, ""
		}, Unverifiable, ReasonCompressInFlight},
		{"user boundary: the compression tip ended by /new", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
			e.r(e.k.Reset(e.ctx, s.Key, ""))
			return s, ""
		}, Stale, ReasonUserBoundary},
		{"unverifiable: compression tip ended for a non-user reason", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			r := e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
			// Another writer ended the continuation without moving the route on.
			e.exec(`UPDATE sessions SET ended_at = 1, end_reason = 'timeout' WHERE id = $1`, r.SessionID)
			e.exec(`UPDATE session_routes SET session_id = $1 WHERE session_key = $2`, s.SessionID, s.Key)
			e.k.cache.drop(s.Key)
			return s, ""
		}, Unverifiable, ReasonTipEnded},
		{"unverifiable: compression chain cycle", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			r := e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
			// Corrupt: the child ended by compression and claims the parent as its child.
			e.exec(`UPDATE sessions SET ended_at = 1, end_reason = 'compression' WHERE id = $1`, r.SessionID)
			e.exec(`UPDATE sessions SET parent_session_id = $1, created_by = 'compression' WHERE id = $2`, r.SessionID, s.SessionID)
			e.k.cache.drop(s.Key)
			return s, ""
		}, Unverifiable, ReasonTipWalk},
		{"unverifiable: stamped key has no route", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			e.exec(`DELETE FROM session_routes WHERE session_key = $1`, s.Key)
			e.k.cache.drop(s.Key)
			return s, ""
		}, Unverifiable, ReasonNoRoute},
		{"unstamped: delivered by route", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			return Stamp{Key: s.Key, Route: src}, s.SessionID
		}, DeliverCurrent, ReasonUnstamped},
		{"unstamped, route on a compressed parent", Options{}, func(e *env) (Stamp, string) {
			s := e.stamp(src)
			r := e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
			e.exec(`UPDATE session_routes SET session_id = $1 WHERE session_key = $2`, s.SessionID, s.Key)
			e.k.cache.drop(s.Key)
			return Stamp{Key: s.Key}, r.SessionID
		}, DeliverCurrent, ReasonUnstamped},
	}
	for _, c := range cases {
		for _, locked := range []bool{false, true} {
			name := c.name + "/preflight"
			if locked {
				name = c.name + "/boundary"
			}
			t.Run(name, func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					e := newEnv(t, c.opt)
					e.t = t
					s, wantSession := c.setup(e)
					var v Verdict
					if locked {
						v = e.classify(s)
					} else {
						v = e.k.Classify(e.ctx, s)
					}
					if v.Kind != c.kind || v.Reason != c.reason || (wantSession != "" && v.SessionID != wantSession) {
						t.Fatalf("verdict %v; want %v to %q (%s)", v, c.kind, wantSession, c.reason)
					}
					if v.Deliverable() != (c.kind == Deliver || c.kind == DeliverContinuation || c.kind == DeliverCurrent) {
						t.Fatal("Deliverable disagrees with Kind")
					}
					// Classifying again (now with a warm cache and a healed route) agrees.
					v2 := e.classify(s)
					if v2.Kind != v.Kind || v2.SessionID != v.SessionID {
						t.Fatalf("second verdict %v differs from %v", v2, v)
					}
				})
			})
		}
	}
}

func endThenResolve(src abi.Source, reason string) func(*env) (Stamp, string) {
	return func(e *env) (Stamp, string) {
		s := e.stamp(src)
		if err := e.k.EndSession(e.ctx, s.SessionID, reason); err != nil {
			e.t.Fatal(err)
		}
		r := e.resolve(src)
		if !r.Created || r.PreviousID != s.SessionID {
			e.t.Fatalf("ended %q row was not replaced: %+v", reason, r)
		}
		return s, r.SessionID
	}
}

// TestClassifyWorkTable is the second half of the table: work a turn started at generation g
// (its answer, or a notification turn) and what happened since. Compression keeps the work: the
// continuation inherits it, followed through the compression markers. Every other transition
// supersedes it. CheckGeneration, the same question without a stamp, must agree.
func TestClassifyWorkTable(t *testing.T) {
	src := dm("300")
	type step func(e *env, s Stamp)
	compress := func(e *env, s Stamp) { e.r(e.k.Compress(e.ctx, s.Key, e.current(s.Key).SessionID, "summary")) }
	stop := func(e *env, s Stamp) { e.r(e.k.Stop(e.ctx, s.Key)) }
	reset := func(e *env, s Stamp) { e.r(e.k.Reset(e.ctx, s.Key, "")) }
	branch := func(e *env, s Stamp) { e.r(e.k.Branch(e.ctx, s.Key, "")) }
	suspend := func(e *env, s Stamp) { e.r(e.k.Suspend(e.ctx, s.Key)) }
	resolve := func(e *env, s Stamp) { e.resolve(src) }
	agentClose := func(e *env, s Stamp) {
		if err := e.k.EndSession(e.ctx, e.current(s.Key).SessionID, EndAgentClose); err != nil {
			e.t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		steps  []step
		kind   VerdictKind
		reason string
	}{
		{"nothing happened", nil, Deliver, ""},
		{"compression", []step{compress}, DeliverContinuation, ""},
		{"three compressions", []step{compress, compress, compress}, DeliverContinuation, ""},
		{"/stop", []step{stop}, Stale, ReasonSuperseded},
		{"compression, then /stop", []step{compress, stop}, Stale, ReasonSuperseded},
		{"/stop, then compression", []step{stop, compress}, Stale, ReasonSuperseded},
		{"/new", []step{reset}, Stale, ReasonUserBoundary},
		{"compression, then /new", []step{compress, reset}, Stale, ReasonUserBoundary},
		{"/branch", []step{branch}, Stale, ReasonUserBoundary},
		{"suspended and replaced", []step{suspend, resolve}, Stale, ReasonSuperseded},
		{"agent_close, reopened", []step{agentClose, resolve}, Stale, ReasonSuperseded},
		{"compression, /new, /resume of the continuation", []step{compress, reset, func(e *env, s Stamp) {
			tip, err := e.k.Tip(e.ctx, s.SessionID)
			if err != nil {
				e.t.Fatal(err)
			}
			e.r(e.k.Resume(e.ctx, s.Key, tip))
		}}, Stale, ReasonSuperseded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, Options{})
			e.t = t
			s := e.stamp(src) // the work starts: a turn in the current session
			gen := s.Generation
			for _, st := range c.steps {
				st(e, s)
			}
			var v Verdict
			var cerr error
			e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error {
				v = b.ClassifyWork(s, gen)
				cerr = b.CheckGeneration(gen)
				return nil
			})
			if v.Kind != c.kind || v.Reason != c.reason {
				t.Fatalf("verdict %v; want %v (%s)", v, c.kind, c.reason)
			}
			if v.Deliverable() {
				if cur := e.current(s.Key); v.SessionID != cur.SessionID || v.Generation != cur.Generation {
					t.Fatalf("deliverable to %s at %d; the key is on %+v", v.SessionID, v.Generation, cur)
				}
			}
			// CheckGeneration asks only "superseded?": it agrees wherever the lineage allows delivery.
			if v.Deliverable() != (cerr == nil) && v.Kind != Unverifiable && v.Reason != ReasonUserBoundary {
				t.Fatalf("CheckGeneration = %v, verdict %v", cerr, v)
			}
			if v.Reason == ReasonSuperseded && !errors.Is(cerr, ErrSuperseded) {
				t.Fatalf("CheckGeneration = %v for a superseded verdict", cerr)
			}
		})
	}
}

// TestClassifyWorkNamesTheTransition: the drop record says what superseded the work.
func TestClassifyWorkNamesTheTransition(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	s := e.stamp(dm("301"))
	e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
	e.r(e.k.Stop(e.ctx, s.Key))
	var v Verdict
	e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error { v = b.ClassifyWork(s, s.Generation); return nil })
	if v.Reason != ReasonSuperseded || !strings.Contains(v.Detail, "/stop") || !strings.Contains(v.Detail, fmt.Sprintf("work started at %d", s.Generation)) {
		t.Fatalf("verdict %v", v)
	}
}

// TestClassifyWorkRowsWithoutMarker: a compression child written before created_gen existed
// carries no marker; work across it fails closed (superseded, recorded), never delivered on a
// guess.
func TestClassifyWorkRowsWithoutMarker(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	s := e.stamp(dm("302"))
	r := e.r(e.k.Compress(e.ctx, s.Key, s.SessionID, ""))
	e.exec(`UPDATE sessions SET created_gen = NULL WHERE id = $1`, r.SessionID)
	var v Verdict
	e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error { v = b.ClassifyWork(s, s.Generation); return nil })
	if v.Kind != Stale || v.Reason != ReasonSuperseded {
		t.Fatalf("verdict %v", v)
	}
}
