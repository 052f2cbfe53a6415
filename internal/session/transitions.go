package session

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hermes-host/hermes-host/abi"
)

// settle loads the route under the lock and, when it points at a compression-ended session
// whose tip is live, moves it to the tip (no generation bump). It returns the route and the row
// the conversation is on (the tip, which may itself be ended when no live continuation exists).
func (b *Boundary) settle() (routeState, rowState, error) {
	st, err := b.load()
	if err != nil || !st.exists {
		return st, rowState{}, err
	}
	cur := rowState{id: st.sid, key: b.key, exists: st.rowExists, ended: st.ended, reason: st.reason}
	if !(cur.exists && cur.ended && cur.reason == EndCompression) {
		return st, cur, nil
	}
	t, err := b.k.tip(b.ctx, cur)
	if err != nil {
		b.k.cache.drop(b.key)
		return st, cur, err
	}
	if t.id == cur.id || t.ended {
		return st, t, nil
	}
	st, err = b.heal(st, t.id)
	return st, t, err
}

// heal moves the route from a compression-ended session to its live tip, keeping the
// generation and the activity clock.
func (b *Boundary) heal(st routeState, tip string) (routeState, error) {
	err := b.tx(func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(b.ctx, `UPDATE session_routes SET session_id = ?
			WHERE session_key = ? AND session_id = ? AND generation = ?`, tip, b.key, st.sid, st.gen))
	})
	if err != nil {
		return st, err
	}
	st.sid, st.rowExists, st.ended, st.reason = tip, true, false, ""
	b.k.cache.set(b.key, st.entry())
	return st, nil
}

// TxFunc is work a caller commits in the same transaction as a transition: typically the
// record of what the transition cancels (queued turns dropped by /new, with their ledger
// records). It runs under the key's lock, inside the transaction, after the route moved; an
// error aborts the transition. It must use only tx (and the boundary's context).
type TxFunc func(tx *sql.Tx) error

// transition runs fn (which moves the route) and then also, in one transaction, and records
// the resulting route in the cache; live says whether the new route is plain (not suspended,
// row live).
func (b *Boundary) transition(live bool, fn func(tx *sql.Tx) (Route, error), also ...TxFunc) (Route, error) {
	var r Route
	err := b.tx(func(tx *sql.Tx) error {
		var err error
		if r, err = fn(tx); err != nil {
			return err
		}
		for _, f := range also {
			if err := f(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Route{}, err
	}
	b.k.cache.set(b.key, cacheEntry{sid: r.SessionID, gen: r.Generation, live: live})
	return r, nil
}

func (b *Boundary) routed() (routeState, rowState, error) {
	if err := b.check(); err != nil {
		return routeState{}, rowState{}, err
	}
	st, cur, err := b.settle()
	if err == nil && !st.exists {
		err = fmt.Errorf("%w: %s", ErrNoRoute, b.key)
	}
	return st, cur, err
}

// Reset is /new and /reset: the current session ends session_reset and a new one, its child,
// becomes current (with title, if not empty). The generation is bumped, which supersedes work
// in flight. also runs in the same transaction (see TxFunc).
func (b *Boundary) Reset(title string, also ...TxFunc) (Route, error) {
	st, cur, err := b.routed()
	if err != nil {
		return Route{}, err
	}
	now := b.k.now()
	return b.transition(true, func(tx *sql.Tx) (Route, error) {
		return b.replace(tx, st, cur, EndReset, createdReset, "", nullStr(title), true, now)
	}, also...)
}

// Resume is /resume: target is a session id or title of this key (the newest session with that
// title). A compressed target resumes at its compression tip. The current session ends
// session_switch, the target is reopened and becomes current; the generation is bumped.
// Resuming the current session changes nothing.
func (b *Boundary) Resume(target string) (Route, error) {
	st, cur, err := b.routed()
	if err != nil {
		return Route{}, err
	}
	t, err := b.findTarget(target)
	if err != nil {
		return Route{}, err
	}
	if t.ended && t.reason == EndCompression {
		if t, err = b.k.tip(b.ctx, t); err != nil {
			return Route{}, err
		}
	}
	if t.id == st.sid && !t.ended && !st.suspended {
		return st.route(b.key), nil
	}
	now := b.k.now()
	return b.transition(true, func(tx *sql.Tx) (Route, error) {
		if cur.exists && !cur.ended && cur.id != t.id {
			if err := mustAffect(tx.ExecContext(b.ctx,
				`UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL`,
				now.UnixMilli(), EndSwitch, cur.id)); err != nil {
				return Route{}, err
			}
		}
		if err := b.k.fail("resume:ended"); err != nil {
			return Route{}, err
		}
		if _, err := tx.ExecContext(b.ctx, `UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?`, t.id); err != nil {
			return Route{}, err
		}
		return b.moveRoute(tx, st, t.id, false, now)
	})
}

// findTarget resolves /resume's argument within this key.
func (b *Boundary) findTarget(target string) (rowState, error) {
	if ValidSessionID(target) {
		r, err := b.k.loadRow(b.ctx, target)
		if err != nil {
			return r, err
		}
		if !r.exists || r.key != b.key {
			return r, fmt.Errorf("%w: %s in %s", ErrNotFound, target, b.key)
		}
		return r, nil
	}
	r := rowState{key: b.key, exists: true}
	err := b.k.db.QueryRowContext(b.ctx, `SELECT id, ended_at IS NOT NULL, COALESCE(end_reason, '')
		FROM sessions WHERE session_key = ? AND title = ? ORDER BY rowid DESC LIMIT 1`, b.key, target).
		Scan(&r.id, &r.ended, &r.reason)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: no session titled %q in %s", ErrNotFound, target, b.key)
	}
	return r, err
}

// Branch is /branch: the current transcript is copied into a new session (marked branched
// from the current one, so compression-tip walks never follow it), the current session ends
// session_switch and the branch becomes current; the generation is bumped.
func (b *Boundary) Branch(title string) (Route, error) {
	st, cur, err := b.routed()
	if err != nil {
		return Route{}, err
	}
	if !cur.exists {
		return Route{}, fmt.Errorf("%w: routed session of %s", ErrNotFound, b.key)
	}
	now := b.k.now()
	return b.transition(true, func(tx *sql.Tx) (Route, error) {
		id, err := b.insertSession(tx, cur.id, cur.id, createdBranch, "", nullStr(title), st.gen+1, now)
		if err != nil {
			return Route{}, err
		}
		if _, err := tx.ExecContext(b.ctx, `INSERT INTO session_messages
			(session_id, role, text, platform_message_id, created_at, redacted_at, copied_from, turn_id, meta)
			SELECT ?, role, text, platform_message_id, created_at, redacted_at, seq, turn_id, meta
			FROM session_messages WHERE session_id = ? ORDER BY seq`, id, cur.id); err != nil {
			return Route{}, err
		}
		if err := b.k.fail("branch:copied"); err != nil {
			return Route{}, err
		}
		if !cur.ended {
			if err := mustAffect(tx.ExecContext(b.ctx,
				`UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL`,
				now.UnixMilli(), EndSwitch, cur.id)); err != nil {
				return Route{}, err
			}
		}
		return b.moveRoute(tx, st, id, false, now)
	})
}

// Stop is /stop: the generation is bumped (work started before it is superseded, see
// CheckGeneration); the session and its transcript are kept. also runs in the same
// transaction (see TxFunc).
func (b *Boundary) Stop(also ...TxFunc) (Route, error) {
	return b.bump(false, also...)
}

// Suspend marks the route suspended and bumps the generation: the next Resolve ends the
// session "suspended" and starts a new one.
func (b *Boundary) Suspend() (Route, error) {
	return b.bump(true)
}

func (b *Boundary) bump(suspend bool, also ...TxFunc) (Route, error) {
	st, _, err := b.routed()
	if err != nil {
		return Route{}, err
	}
	st.suspended = st.suspended || suspend
	return b.transition(st.entry().live, func(tx *sql.Tx) (Route, error) {
		if err := mustAffect(tx.ExecContext(b.ctx, `UPDATE session_routes SET generation = ?, suspended = ?
			WHERE session_key = ? AND session_id = ? AND generation = ?`,
			st.gen+1, boolInt(st.suspended), b.key, st.sid, st.gen)); err != nil {
			return Route{}, err
		}
		return Route{Key: b.key, SessionID: st.sid, Generation: st.gen + 1}, nil
	}, also...)
}

// boolInt is b as the 0 or 1 an INTEGER flag column holds (PostgreSQL does not take a boolean
// for a BIGINT).
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Compress rotates the conversation: the current session, which must be expected (compare
// and set) and live, ends "compression"; a child carrying its title (and, if summary is not
// empty, a system message with it) continues it and becomes current; the generation is bumped.
// A turn that compresses its own session continues with the returned generation.
func (b *Boundary) Compress(expected, summary string) (Route, error) {
	st, cur, err := b.routed()
	if err != nil {
		return Route{}, err
	}
	if cur.id != expected || st.sid != expected || cur.ended {
		return Route{}, fmt.Errorf("%w: %s is on %s, not live %s", ErrConflict, b.key, st.sid, expected)
	}
	now := b.k.now()
	return b.transition(true, func(tx *sql.Tx) (Route, error) {
		var title sql.NullString
		if err := tx.QueryRowContext(b.ctx, `SELECT title FROM sessions WHERE id = ?`, cur.id).Scan(&title); err != nil {
			return Route{}, err
		}
		r, err := b.replace(tx, st, cur, EndCompression, createdCompression, "", title, false, now)
		if err != nil {
			return r, err
		}
		// The continuation keeps the conversation's model (its usage is counted afresh).
		if _, err := tx.ExecContext(b.ctx, `UPDATE sessions SET model = (SELECT model FROM sessions WHERE id = ?) WHERE id = ?`,
			cur.id, r.SessionID); err != nil {
			return r, err
		}
		if summary == "" {
			return r, nil
		}
		_, err = tx.ExecContext(b.ctx, `INSERT INTO session_messages (session_id, role, text, created_at)
			VALUES (?, 'system', ?, ?)`, r.SessionID, summary, now.UnixMilli())
		return r, err
	})
}

// End records that session id (of this key) ended for reason without moving the route: for
// the agent being closed (agent_close), a socket reaped, a cron run completing, a timeout. When
// it is the routed session the generation is bumped, and the next Resolve reopens it
// (agent_close, ws_orphan_reap) or replaces it. Ending an ended session changes nothing. Use
// Compress for compression and the transitions for user boundaries.
func (b *Boundary) End(id, reason string) error {
	if err := b.check(); err != nil {
		return err
	}
	if reason == EndCompression {
		return fmt.Errorf("session: End(%s): use Compress", reason)
	}
	r, err := b.k.loadRow(b.ctx, id)
	if err != nil {
		return err
	}
	if !r.exists || r.key != b.key {
		return fmt.Errorf("%w: %s in %s", ErrNotFound, id, b.key)
	}
	if r.ended {
		return nil
	}
	st, err := b.load()
	if err != nil {
		return err
	}
	routed := st.exists && st.sid == id
	now := b.k.now()
	err = b.tx(func(tx *sql.Tx) error {
		if err := mustAffect(tx.ExecContext(b.ctx,
			`UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL`,
			now.UnixMilli(), reason, id)); err != nil {
			return err
		}
		if !routed {
			return nil
		}
		return mustAffect(tx.ExecContext(b.ctx, `UPDATE session_routes SET generation = ?
			WHERE session_key = ? AND session_id = ? AND generation = ?`, st.gen+1, b.key, st.sid, st.gen))
	})
	if err != nil {
		return err
	}
	if routed {
		st.gen, st.ended, st.reason = st.gen+1, true, reason
		b.k.cache.set(b.key, st.entry())
	}
	return nil
}

// SetTitle sets the title of the current session (used by /resume <title>).
func (b *Boundary) SetTitle(title string) error {
	_, cur, err := b.routed()
	if err != nil {
		return err
	}
	_, err = b.k.db.ExecContext(b.ctx, `UPDATE sessions SET title = ? WHERE id = ?`, nullStr(title), cur.id)
	return err
}

// Generation returns the key's current generation.
func (b *Boundary) Generation() (int64, error) {
	if err := b.check(); err != nil {
		return 0, err
	}
	if e, ok := b.k.cache.get(b.key); ok {
		return e.gen, nil
	}
	st, err := b.load()
	if err != nil {
		return 0, err
	}
	if !st.exists {
		return 0, fmt.Errorf("%w: %s", ErrNoRoute, b.key)
	}
	return st.gen, nil
}

// CheckGeneration returns nil if work started at generation gen is still wanted: the key is
// still at gen, or every transition since was a compression (the work follows the
// conversation into its continuation). It returns an error wrapping ErrSuperseded if any other
// transition (/stop, /new, /reset, /resume, /branch, a replacement, an end) happened since. A
// turn captures the generation when it starts and checks it, inside the boundary, before
// committing its output.
func (b *Boundary) CheckGeneration(gen int64) error {
	if err := b.check(); err != nil {
		return err
	}
	if e, ok := b.k.cache.get(b.key); ok && e.gen == gen {
		return nil
	}
	st, err := b.load()
	if err != nil {
		return err
	}
	if !st.exists {
		return fmt.Errorf("%w: %s", ErrNoRoute, b.key)
	}
	why, err := b.supersededSince(gen, st)
	if err != nil {
		return err
	}
	if why != "" {
		return fmt.Errorf("%w: %s", ErrSuperseded, why)
	}
	return nil
}

// supersededSince reports why work started at generation gen is no longer wanted, or "" when
// every generation bump since gen was a compression. It follows the explicit compression
// markers back from the route st: a routed session created by compression (created_by) at
// exactly the route's generation (created_gen) accounts for one bump, and its parent was the
// route one generation earlier. Any other bump (a /stop, or a transition that created a
// different kind of session, or reopened one) ends the walk: the work is superseded. Rows
// without a marker (written before it existed) count as superseding: fail closed.
func (b *Boundary) supersededSince(gen int64, st routeState) (string, error) {
	sid, g := st.sid, st.gen
	for hops := 0; g > gen; hops++ {
		if hops >= b.k.opt.MaxTipHops {
			return fmt.Sprintf("more than %d compressions since generation %d", b.k.opt.MaxTipHops, gen), nil
		}
		var (
			createdBy, parent string
			createdGen        sql.NullInt64
		)
		err := b.k.db.QueryRowContext(b.ctx, `SELECT created_by, COALESCE(parent_session_id, ''), created_gen
			FROM sessions WHERE id = ?`, sid).Scan(&createdBy, &parent, &createdGen)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Sprintf("session %s is missing; work started at generation %d", sid, gen), nil
		}
		if err != nil {
			return "", fmt.Errorf("session: generation history of %s: %w", b.key, err)
		}
		if createdBy != createdCompression || !createdGen.Valid || createdGen.Int64 != g {
			return fmt.Sprintf("%s at generation %d (work started at %d, key now at %d)",
				bumpedBy(createdBy, createdGen, g), g, gen, st.gen), nil
		}
		sid, g = parent, g-1
	}
	if g < gen {
		return fmt.Sprintf("work claims generation %d, key is at %d", gen, st.gen), nil
	}
	return "", nil
}

// bumpedBy names the transition that moved the key to generation g, as far as the rows tell:
// the session routed at g was created by it, or (when it is older) the route stayed or moved
// to an existing session.
func bumpedBy(createdBy string, createdGen sql.NullInt64, g int64) string {
	if !createdGen.Valid || createdGen.Int64 != g {
		return "/stop, /resume or a session end"
	}
	switch createdBy {
	case createdReset:
		return "/new"
	case createdBranch:
		return "/branch"
	case createdReplace:
		return "a session replacement"
	}
	return "a " + createdBy + " transition"
}

// Stamp returns the stamp for work started now in this key's current session (a background
// process spawned by a turn): key, session, generation and the route to answer on.
func (b *Boundary) Stamp(route abi.Source) (Stamp, error) {
	st, cur, err := b.routed()
	if err != nil {
		return Stamp{}, err
	}
	return Stamp{Key: b.key, SessionID: cur.id, Profile: route.Profile, Generation: st.gen, Route: route}, nil
}

// ---- kernel-level conveniences: each takes the key's boundary for one call ----------------

func (k *Kernel) with(ctx context.Context, key string, fn func(b *Boundary) (Route, error)) (Route, error) {
	var r Route
	err := k.WithBoundary(ctx, key, func(b *Boundary) error {
		var err error
		r, err = fn(b)
		return err
	})
	return r, err
}

// Reset runs Boundary.Reset in key's boundary.
func (k *Kernel) Reset(ctx context.Context, key, title string) (Route, error) {
	return k.with(ctx, key, func(b *Boundary) (Route, error) { return b.Reset(title) })
}

// Resume runs Boundary.Resume in key's boundary.
func (k *Kernel) Resume(ctx context.Context, key, target string) (Route, error) {
	return k.with(ctx, key, func(b *Boundary) (Route, error) { return b.Resume(target) })
}

// Branch runs Boundary.Branch in key's boundary.
func (k *Kernel) Branch(ctx context.Context, key, title string) (Route, error) {
	return k.with(ctx, key, func(b *Boundary) (Route, error) { return b.Branch(title) })
}

// Stop runs Boundary.Stop in key's boundary.
func (k *Kernel) Stop(ctx context.Context, key string) (Route, error) {
	return k.with(ctx, key, func(b *Boundary) (Route, error) { return b.Stop() })
}

// Suspend runs Boundary.Suspend in key's boundary.
func (k *Kernel) Suspend(ctx context.Context, key string) (Route, error) {
	return k.with(ctx, key, func(b *Boundary) (Route, error) { return b.Suspend() })
}

// Compress runs Boundary.Compress in key's boundary.
func (k *Kernel) Compress(ctx context.Context, key, expected, summary string) (Route, error) {
	return k.with(ctx, key, func(b *Boundary) (Route, error) { return b.Compress(expected, summary) })
}

// EndSession runs Boundary.End for session id in its key's boundary.
func (k *Kernel) EndSession(ctx context.Context, id, reason string) error {
	r, err := k.loadRow(ctx, id)
	if err != nil {
		return err
	}
	if !r.exists {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return k.WithBoundary(ctx, r.key, func(b *Boundary) error { return b.End(id, reason) })
}

// IsCurrent reports whether key is still at generation gen. Outside a boundary this is
// advisory; use Boundary.CheckGeneration before committing work.
func (k *Kernel) IsCurrent(ctx context.Context, key string, gen int64) (bool, error) {
	r, ok, err := k.Current(ctx, key)
	if err != nil || !ok {
		return false, err
	}
	return r.Generation == gen, nil
}
