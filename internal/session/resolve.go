package session

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
)

// ResolveOptions tune Resolve.
type ResolveOptions struct {
	// Internal marks a lookup that is not user activity (a notification, a seed, a cron send):
	// the activity clock that drives idle/daily auto-reset is left alone.
	Internal bool
	// ForceNew ends the current session (session_reset) and starts a new one. Concurrent
	// Kernel.Resolve calls with ForceNew for one key share one new session.
	ForceNew bool
	// NoAutoReset skips the time-based auto-reset check for this lookup.
	NoAutoReset bool
}

// Resolution is the outcome of Resolve: the key's route afterwards and what Resolve did.
type Resolution struct {
	Route
	Created    bool   // a new physical session was created (first message, or a replacement)
	PreviousID string // the session it replaced, if any
	// Reason says why the previous session was replaced: EndSuspended, EndIdle, EndDaily,
	// EndReset (ForceNew), the end reason of a routed row found ended, or "missing".
	Reason   string
	Healed   bool // the route pointed at a compression-ended session and was moved to its tip
	Reopened bool // the routed session had ended agent_close/ws_orphan_reap and was reopened
}

// Resolve gets or creates the session of src, whose key must be this boundary's. In one
// transaction it also repairs the route and applies the reset rules, in this order:
//
//   - no route: create a session (generation 1);
//   - route on a compression-ended session whose tip is live: move the route to the tip
//     (no generation bump: the conversation is the same);
//   - routed session ended agent_close or ws_orphan_reap: reopen it with the same id;
//     ended for any other reason: start a new session, child of it;
//   - route suspended: end the session "suspended" and start a new one;
//   - ForceNew: end it session_reset and start a new one;
//   - auto-reset (if configured, and unless the key has a live background process): end it
//     idle or daily and start a new one.
//
// Every replacement bumps the generation. Unless opt.Internal, the activity clock is touched.
func (b *Boundary) Resolve(src abi.Source, opt ResolveOptions) (Resolution, error) {
	if err := b.check(); err != nil {
		return Resolution{}, err
	}
	key, err := b.k.Key(src)
	if err != nil {
		return Resolution{}, err
	}
	if key != b.key {
		return Resolution{}, fmt.Errorf("%w: %s is not %s", ErrKeyMismatch, key, b.key)
	}
	k := b.k
	autoReset := !opt.NoAutoReset && k.opt.AutoReset.Mode != ResetNone
	if opt.Internal && !opt.ForceNew && !autoReset {
		if e, ok := k.cache.get(b.key); ok && e.live {
			return Resolution{Route: Route{Key: b.key, SessionID: e.sid, Generation: e.gen}}, nil
		}
	}
	st, err := b.load()
	if err != nil {
		return Resolution{}, err
	}
	now := k.now()
	if !st.exists {
		return b.create(src, now)
	}
	// cur is the row the conversation is really on: the routed row, or its compression tip.
	cur := rowState{id: st.sid, key: b.key, exists: st.rowExists, ended: st.ended, reason: st.reason}
	heal := false
	if cur.exists && cur.ended && cur.reason == EndCompression {
		t, err := k.tip(b.ctx, cur)
		if err != nil {
			k.cache.drop(b.key)
			return Resolution{}, err
		}
		if t.id != cur.id {
			cur, heal = t, !t.ended
		}
	}

	res := Resolution{Route: st.route(b.key)}
	replace := true      // start a new session, child of cur
	var endReason string // what to end cur with, if it is live
	switch {
	case !cur.exists:
		res.Reason = "missing"
	case cur.ended && reopenable(cur.reason) && !st.suspended:
		replace, res.Reopened = false, true
	case cur.ended:
		res.Reason = cur.reason
		if st.suspended {
			res.Reason = EndSuspended
		}
	case st.suspended:
		endReason = EndSuspended
	case opt.ForceNew:
		endReason = EndReset
	case autoReset:
		endReason = k.opt.AutoReset.due(time.UnixMilli(st.updatedAt), now)
		if endReason != "" && b.hasLiveProcess() {
			endReason = ""
		}
		replace = endReason != ""
	default:
		replace = false
	}
	if replace {
		if endReason != "" {
			res.Reason = endReason
		}
		prev := cur.id
		if !cur.exists {
			cur, prev = rowState{}, st.sid
		}
		var r Route
		err := b.tx(func(tx *store.Tx) error {
			var err error
			createdBy := createdReplace
			if endReason == EndReset {
				createdBy = createdReset
			}
			r, err = b.replace(tx, st, cur, endReason, createdBy, encodeSource(src), sql.NullString{}, !opt.Internal, now)
			return err
		})
		if err != nil {
			return Resolution{}, err
		}
		k.cache.set(b.key, cacheEntry{sid: r.SessionID, gen: r.Generation, live: true})
		res.Route, res.Created, res.PreviousID = r, true, prev
		return res, nil
	}

	touch := !opt.Internal
	if !heal && !res.Reopened {
		if !touch {
			return res, nil // b.load refreshed the cache
		}
		// The common case, a message on a live session: one autocommitted compare-and-set.
		if err := mustAffect(k.stTouch.ExecContext(b.ctx, now.UnixMilli(), b.key, st.sid, st.gen)); err != nil {
			k.cache.drop(b.key)
			return Resolution{}, err
		}
		return res, nil
	}
	err = b.tx(func(tx *store.Tx) error {
		if res.Reopened {
			if err := mustAffect(tx.ExecContext(b.ctx,
				`UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = $1 AND ended_at IS NOT NULL`,
				cur.id)); err != nil {
				return err
			}
		}
		if err := k.fail("resolve:before-route"); err != nil {
			return err
		}
		updated := st.updatedAt
		if touch {
			updated = now.UnixMilli()
		}
		return mustAffect(tx.ExecContext(b.ctx, `UPDATE session_routes SET session_id = $1, updated_at = $2
			WHERE session_key = $3 AND session_id = $4 AND generation = $5`,
			cur.id, updated, b.key, st.sid, st.gen))
	})
	if err != nil {
		return Resolution{}, err
	}
	res.SessionID, res.Healed = cur.id, cur.id != st.sid
	k.cache.set(b.key, cacheEntry{sid: cur.id, gen: st.gen, live: true})
	return res, nil
}

// create makes the key's first session and route.
func (b *Boundary) create(src abi.Source, now time.Time) (Resolution, error) {
	var id string
	err := b.tx(func(tx *store.Tx) error {
		var err error
		id, err = b.insertSession(tx, "", "", createdNew, encodeSource(src), sql.NullString{}, 1, now)
		if err != nil {
			return err
		}
		if err := b.k.fail("create:before-route"); err != nil {
			return err
		}
		_, err = tx.ExecContext(b.ctx, `INSERT INTO session_routes
			(session_key, session_id, generation, suspended, created_at, updated_at) VALUES ($1, $2, 1, 0, $3, $4)`,
			b.key, id, now.UnixMilli(), now.UnixMilli())
		return err
	})
	if err != nil {
		return Resolution{}, err
	}
	b.k.cache.set(b.key, cacheEntry{sid: id, gen: 1, live: true})
	return Resolution{Route: Route{Key: b.key, SessionID: id, Generation: 1}, Created: true}, nil
}

// replace ends cur (when it exists and is live) with endReason, inserts a child of cur and
// moves the route there with a generation bump, compare-and-set on the route as loaded in st.
// origin "" copies cur's origin. It is the one implementation of "the key moves to a new
// session"; the caller commits and then refreshes the cache.
func (b *Boundary) replace(tx *store.Tx, st routeState, cur rowState, endReason, createdBy, origin string,
	title sql.NullString, touch bool, now time.Time) (Route, error) {
	if cur.exists && !cur.ended {
		if err := mustAffect(tx.ExecContext(b.ctx,
			`UPDATE sessions SET ended_at = $1, end_reason = $2 WHERE id = $3 AND ended_at IS NULL`,
			now.UnixMilli(), endReason, cur.id)); err != nil {
			return Route{}, err
		}
	}
	if err := b.k.fail("replace:ended"); err != nil {
		return Route{}, err
	}
	id, err := b.insertSession(tx, cur.id, "", createdBy, origin, title, st.gen+1, now)
	if err != nil {
		return Route{}, err
	}
	if err := b.k.fail("replace:inserted"); err != nil {
		return Route{}, err
	}
	return b.moveRoute(tx, st, id, touch, now)
}

// moveRoute points the route at id with a generation bump, clearing suspension.
func (b *Boundary) moveRoute(tx *store.Tx, st routeState, id string, touch bool, now time.Time) (Route, error) {
	updated := st.updatedAt
	if touch {
		updated = now.UnixMilli()
	}
	if err := mustAffect(tx.ExecContext(b.ctx, `UPDATE session_routes
		SET session_id = $1, generation = $2, suspended = 0, updated_at = $3
		WHERE session_key = $4 AND session_id = $5 AND generation = $6`,
		id, st.gen+1, updated, b.key, st.sid, st.gen)); err != nil {
		return Route{}, err
	}
	return Route{Key: b.key, SessionID: id, Generation: st.gen + 1}, nil
}

func (b *Boundary) hasLiveProcess() bool {
	p := b.k.opt.Processes
	if p == nil {
		return false
	}
	live, err := p.HasLiveProcess(b.ctx, b.key)
	return err != nil || live // an error counts as live: never reset on doubt
}

// due returns EndIdle or EndDaily when a session last active at last should be auto-reset at
// now, or "".
func (p ResetPolicy) due(last, now time.Time) string {
	if p.Mode == ResetIdle || p.Mode == ResetBoth {
		if now.Sub(last) >= p.IdleAfter {
			return EndIdle
		}
	}
	if p.Mode == ResetDaily || p.Mode == ResetBoth {
		n := now.In(p.Location)
		boundary := time.Date(n.Year(), n.Month(), n.Day(), p.AtHour, 0, 0, 0, p.Location)
		if boundary.After(n) {
			boundary = boundary.AddDate(0, 0, -1)
		}
		if last.Before(boundary) {
			return EndDaily
		}
	}
	return ""
}

// Resolve gets or creates src's session inside its key's boundary (see Boundary.Resolve).
// Concurrent calls for one key with the same options are single-flight: callers arriving while
// one is in flight share its result, so concurrent first messages create exactly one session
// and concurrent ForceNew calls exactly one replacement. A joiner shares the first caller's
// outcome, including an error from that caller's context; its own context only bounds its wait.
func (k *Kernel) Resolve(ctx context.Context, src abi.Source, opt ResolveOptions) (Resolution, error) {
	if InBoundary(ctx) {
		return Resolution{}, ErrNestedBoundary
	}
	key, err := k.Key(src)
	if err != nil {
		return Resolution{}, err
	}
	fk := fmt.Sprintf("%s\x00%t%t%t", key, opt.Internal, opt.ForceNew, opt.NoAutoReset)
	return k.flights.do(ctx, fk, func() (Resolution, error) {
		var res Resolution
		err := k.WithBoundary(ctx, key, func(b *Boundary) error {
			var err error
			res, err = b.Resolve(src, opt)
			return err
		})
		return res, err
	})
}

// Observe resolves src's session and appends msgs to it in the same critical section (the
// observe and seed host functions).
func (k *Kernel) Observe(ctx context.Context, src abi.Source, opt ResolveOptions, msgs ...Message) (Resolution, error) {
	key, err := k.Key(src)
	if err != nil {
		return Resolution{}, err
	}
	var res Resolution
	err = k.WithBoundary(ctx, key, func(b *Boundary) error {
		var err error
		if res, err = b.Resolve(src, opt); err != nil {
			return err
		}
		for _, m := range msgs {
			if _, err := b.Append(res.SessionID, m); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}
