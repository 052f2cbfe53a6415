package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/hermes-host/hermes-host/abi"
)

// VerdictKind is the outcome of classifying a stamped event.
type VerdictKind int

// Verdict kinds. The zero value is Unverifiable, so a Verdict that was never filled in fails
// closed.
const (
	// Unverifiable: the owner cannot be resolved (store error, missing row, compression still in
	// flight). Never deliver; retry with backoff, then drop as unverifiable.
	Unverifiable VerdictKind = iota
	// Deliver: the key's current session is the stamped session.
	Deliver
	// DeliverContinuation: the stamped session ended by compression and its live tip is (or,
	// after healing, becomes) the key's current session. SessionID is the tip.
	DeliverContinuation
	// DeliverCurrent: deliver to the key's current session (SessionID): the event is unstamped,
	// or the stamped session ended for a non-user reason (idle, daily, timeout, agent_close,
	// cron_complete, suspended, empty). SessionID is "" for an unstamped event on a key with no
	// session yet: resolve one from the stamp's route.
	DeliverCurrent
	// Stale: the user has left the stamped conversation. Drop, recorded with Reason.
	Stale
)

// String returns the kind's name as used in logs and drop records.
func (v VerdictKind) String() string {
	switch v {
	case Deliver:
		return "deliver"
	case DeliverContinuation:
		return "deliver-continuation"
	case DeliverCurrent:
		return "deliver-current"
	case Stale:
		return "stale"
	default:
		return "unverifiable"
	}
}

// Reasons carried by a Verdict.
const (
	ReasonUnstamped        = "unstamped"             // DeliverCurrent: no stamp, delivered by route
	ReasonEndedNonUser     = "ended_non_user"        // DeliverCurrent: stamped session ended idle, daily, …
	ReasonUserBoundary     = "user_boundary"         // Stale: the stamped (or routed) session ended at a user boundary
	ReasonMoved            = "moved"                 // Stale: the key points at a session not descended by compression
	ReasonKeyMismatch      = "key_mismatch"          // Stale: the stamped session or profile is not the key's
	ReasonSuperseded       = "superseded"            // Stale (ClassifyWork): the generation changed since the work started
	ReasonStore            = "store_error"           // Unverifiable: the store failed
	ReasonSessionMissing   = "session_missing"       // Unverifiable: the stamped or routed session row does not exist
	ReasonNoRoute          = "no_route"              // Unverifiable: a stamped event for a key with no route
	ReasonCompressInFlight = "compression_in_flight" // Unverifiable: compression ended the session, no continuation visible
	ReasonTipEnded         = "compression_tip_ended" // Unverifiable: the compression tip ended for a non-user reason
	ReasonTipWalk          = "compression_chain"     // Unverifiable: the chain is cyclic or longer than MaxTipHops
)

// Verdict is the classification of one event.
type Verdict struct {
	Kind       VerdictKind
	SessionID  string // where to deliver, for the Deliver kinds
	Generation int64  // the key's generation when classified (0 if unknown)
	Reason     string // a Reason* code
	Detail     string // human-readable detail for logs and the drop record
	Err        error  // the store error behind ReasonStore
}

// Deliverable reports whether the event may be sent (to SessionID).
func (v Verdict) Deliverable() bool {
	return v.Kind == Deliver || v.Kind == DeliverContinuation || v.Kind == DeliverCurrent
}

// Owned reports whether the stamped session itself (or its compression continuation) owns the
// chat. Strict callers (a scheduler send pinned to a session) deliver only when Owned.
func (v Verdict) Owned() bool { return v.Kind == Deliver || v.Kind == DeliverContinuation }

// String renders the verdict for logs: kind, target and reason.
func (v Verdict) String() string {
	s := v.Kind.String()
	if v.SessionID != "" {
		s += " to " + v.SessionID
	}
	if v.Reason != "" {
		s += " (" + v.Reason
		if v.Detail != "" {
			s += ": " + v.Detail
		}
		s += ")"
	}
	return s
}

func unverifiable(reason, detail string, err error) Verdict {
	return Verdict{Kind: Unverifiable, Reason: reason, Detail: detail, Err: err}
}

func storeFailure(err error) Verdict {
	if errors.Is(err, errTipWalk) {
		return unverifiable(ReasonTipWalk, err.Error(), err)
	}
	return unverifiable(ReasonStore, err.Error(), err)
}

// Classify is the pre-flight classification of s, computed without the boundary lock and
// without changing anything (see the table in ARCHITECTURE.md §3 and Boundary.Classify). It
// tells the watcher early whether to bother; the authoritative verdict is the one computed
// again inside the boundary, immediately before the send.
func (k *Kernel) Classify(ctx context.Context, s Stamp) Verdict {
	return k.classify(ctx, s, nil)
}

// Classify classifies s under the lock; it is exact, and the send that follows it in the same
// callback cannot be overtaken by a transition. When the route still points at a
// compression-ended session whose tip is the delivery target, it heals the route to the tip
// (the compare-and-set "advance" of the Python gateway). The classification is by session
// lineage only: a /stop in between does not make a completion stale (see ClassifyWork).
func (b *Boundary) Classify(s Stamp) Verdict {
	if err := b.check(); err != nil {
		return unverifiable(ReasonStore, err.Error(), err)
	}
	if s.Key != b.key {
		return Verdict{Kind: Stale, Reason: ReasonKeyMismatch, Detail: fmt.Sprintf("stamp key %s in boundary %s", s.Key, b.key)}
	}
	return b.k.classify(b.ctx, s, b)
}

// ClassifyWork is Classify for work that started at generation gen (a turn's answer, a
// synthetic turn started for a notification): a deliverable verdict becomes
// Stale(superseded) if a transition that supersedes work happened since (/stop, /new, /reset,
// /resume, /branch, a replacement or an end). Compression does not: the continuation inherits
// the work, followed through the compression markers (see CheckGeneration), and the verdict
// names the continuation.
func (b *Boundary) ClassifyWork(s Stamp, gen int64) Verdict {
	v := b.Classify(s)
	if !v.Deliverable() || v.Generation == gen {
		return v
	}
	st, err := b.load()
	if err != nil {
		return storeFailure(err)
	}
	if !st.exists {
		return unverifiable(ReasonNoRoute, s.Key+" has no route", nil)
	}
	why, err := b.supersededSince(gen, st)
	if err != nil {
		return storeFailure(err)
	}
	if why != "" {
		return Verdict{Kind: Stale, Reason: ReasonSuperseded, Generation: st.gen, Detail: why}
	}
	return v
}

// classify implements the table. b is non-nil when the lock is held: then cache refreshes and
// route healing are allowed.
func (k *Kernel) classify(ctx context.Context, s Stamp, b *Boundary) Verdict {
	if !k.opt.Keys.profileMatches(s.Key, s.Profile) {
		return Verdict{Kind: Stale, Reason: ReasonKeyMismatch, Detail: fmt.Sprintf("profile %s does not own %s", s.Profile, s.Key)}
	}
	// Warm path: the key is on a live, unsuspended session.
	if e, ok := k.cache.get(s.Key); ok && e.live {
		if !s.Stamped() {
			return Verdict{Kind: DeliverCurrent, SessionID: e.sid, Generation: e.gen, Reason: ReasonUnstamped}
		}
		if e.sid == s.SessionID {
			return Verdict{Kind: Deliver, SessionID: e.sid, Generation: e.gen}
		}
	}

	var st routeState
	var err error
	if b != nil {
		st, err = b.load()
	} else {
		st, err = k.loadRoute(ctx, s.Key)
	}
	if err != nil {
		return storeFailure(err)
	}
	route := rowState{id: st.sid, key: s.Key, exists: st.rowExists, ended: st.ended, reason: st.reason}

	if !s.Stamped() {
		if !st.exists {
			return Verdict{Kind: DeliverCurrent, Reason: ReasonUnstamped, Detail: "key has no session yet"}
		}
		v := k.current(ctx, b, st, route)
		if v.Kind == DeliverCurrent {
			v.Reason = ReasonUnstamped
		}
		return v
	}

	p, err := k.loadRow(ctx, s.SessionID)
	if err != nil {
		return storeFailure(err)
	}
	if !p.exists {
		return unverifiable(ReasonSessionMissing, "stamped session "+s.SessionID+" not found", nil)
	}
	if p.key != s.Key {
		return Verdict{Kind: Stale, Reason: ReasonKeyMismatch, Detail: fmt.Sprintf("session %s belongs to %s", p.id, p.key)}
	}
	if !st.exists {
		return unverifiable(ReasonNoRoute, s.Key+" has no route", nil)
	}
	switch {
	case p.ended && p.reason == EndCompression:
		return k.lineage(ctx, b, st, route, p)
	case route.id == p.id:
		if p.ended && UserBoundary(p.reason) {
			return Verdict{Kind: Stale, Reason: ReasonUserBoundary, Generation: st.gen, Detail: "session " + p.id + " ended " + p.reason}
		}
		return Verdict{Kind: Deliver, SessionID: p.id, Generation: st.gen}
	case p.ended && UserBoundary(p.reason):
		return Verdict{Kind: Stale, Reason: ReasonUserBoundary, Generation: st.gen, Detail: "session " + p.id + " ended " + p.reason}
	case p.ended:
		v := k.current(ctx, b, st, route)
		if v.Kind == DeliverCurrent {
			v.Reason, v.Detail = ReasonEndedNonUser, "session "+p.id+" ended "+quoteReason(p.reason)
		}
		return v
	default:
		return Verdict{Kind: Stale, Reason: ReasonMoved, Generation: st.gen,
			Detail: fmt.Sprintf("%s moved from %s to %s", s.Key, p.id, route.id)}
	}
}

func quoteReason(r string) string {
	if r == "" {
		return `""`
	}
	return r
}

// current is "deliver to the key's current session": the routed session, or its compression
// tip when the route still points at a compressed parent.
func (k *Kernel) current(ctx context.Context, b *Boundary, st routeState, route rowState) Verdict {
	switch {
	case !route.exists:
		return unverifiable(ReasonSessionMissing, "routed session "+route.id+" not found", nil)
	case !route.ended:
		return Verdict{Kind: DeliverCurrent, SessionID: route.id, Generation: st.gen}
	case route.reason == EndCompression:
		t, v, ok := k.liveTip(ctx, route)
		if !ok {
			return v
		}
		if v := k.healTo(b, st, t.id); v != nil {
			return *v
		}
		return Verdict{Kind: DeliverCurrent, SessionID: t.id, Generation: st.gen}
	case UserBoundary(route.reason):
		return Verdict{Kind: Stale, Reason: ReasonUserBoundary, Generation: st.gen, Detail: "routed session " + route.id + " ended " + route.reason}
	default:
		// Ended for a non-user reason but still routed: the next lookup reopens or replaces it.
		return Verdict{Kind: DeliverCurrent, SessionID: route.id, Generation: st.gen}
	}
}

// lineage classifies a stamp whose session p ended by compression.
func (k *Kernel) lineage(ctx context.Context, b *Boundary, st routeState, route, p rowState) Verdict {
	t, v, ok := k.liveTip(ctx, p)
	if !ok {
		v.Generation = st.gen
		return v
	}
	cont := func() Verdict {
		if st.sid != t.id {
			if v := k.healTo(b, st, t.id); v != nil {
				return *v
			}
		}
		return Verdict{Kind: DeliverContinuation, SessionID: t.id, Generation: st.gen}
	}
	if route.id == p.id || route.id == t.id {
		return cont()
	}
	if !route.exists {
		return unverifiable(ReasonSessionMissing, "routed session "+route.id+" not found", nil)
	}
	if route.ended && route.reason == EndCompression {
		rt, v, ok := k.liveTip(ctx, route)
		if !ok {
			return v
		}
		if rt.id == t.id {
			return cont()
		}
	}
	return Verdict{Kind: Stale, Reason: ReasonMoved, Generation: st.gen,
		Detail: fmt.Sprintf("key is on %s, not on %s's continuation %s", route.id, p.id, t.id)}
}

// liveTip walks from the compression-ended row r to its tip and checks that it is live.
func (k *Kernel) liveTip(ctx context.Context, r rowState) (rowState, Verdict, bool) {
	t, err := k.tip(ctx, r)
	if err != nil {
		return t, storeFailure(err), false
	}
	if t.id == r.id {
		return t, unverifiable(ReasonCompressInFlight, "session "+r.id+" ended by compression; no continuation visible yet", nil), false
	}
	if t.ended && UserBoundary(t.reason) {
		// Compression is one transaction here, so a continuation that ended is final: the user
		// left the conversation after it was compressed.
		return t, Verdict{Kind: Stale, Reason: ReasonUserBoundary,
			Detail: fmt.Sprintf("compression tip %s of %s ended %s", t.id, r.id, t.reason)}, false
	}
	if t.ended {
		return t, unverifiable(ReasonTipEnded, fmt.Sprintf("compression tip %s of %s ended %s", t.id, r.id, quoteReason(t.reason)), nil), false
	}
	return t, Verdict{}, true
}

// healTo moves the route to tip when the lock is held (b != nil); it returns a verdict only on
// failure.
func (k *Kernel) healTo(b *Boundary, st routeState, tip string) *Verdict {
	if b == nil || st.sid == tip {
		return nil
	}
	if _, err := b.heal(st, tip); err != nil {
		v := storeFailure(err)
		return &v
	}
	return nil
}

// VerifyRoute checks that src, the source recovered for delivering s (from the store origin,
// a cache or the key), derives the stamped key; a mismatch (a DM/group bleed) is
// ErrKeyMismatch and the event must be dropped.
func (k *Kernel) VerifyRoute(s Stamp, src abi.Source) error {
	key, err := k.Key(src)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeyMismatch, err)
	}
	if key != s.Key {
		return fmt.Errorf("%w: route derives %s, stamp says %s", ErrKeyMismatch, key, s.Key)
	}
	return nil
}
