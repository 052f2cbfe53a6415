package delivery

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// ErrOutcomeUnknown wraps a transport failure after which the platform may or may not have
// accepted the message (the plugin crashed or ran past its deadline mid-send). Such a part is
// failed, not retried: retrying could duplicate it.
var ErrOutcomeUnknown = errors.New("delivery: " + UncertainMark)

// ErrPluginStarting is wrapped by a Transport's Limit while the host is still loading plugins:
// the plugin may yet appear, so waiting for it does not use up the message's attempts.
var ErrPluginStarting = errors.New("the host is still loading its plugins")

// Reason strings recorded on rows.
const (
	ReasonInterrupted = "outcome unknown: the host stopped while sending; not resent to avoid a duplicate"
	ReasonNotOwned    = "not_owned"
)

// lane serializes the messages of one chat. Fields are guarded by Ledger.mu.
type lane struct {
	id      string
	running bool
	kick    chan struct{} // buffered(1): new work or a state change
	// hold is the lane's lease while runLane runs it with several hosts (nil otherwise). Only
	// the lane's running goroutine reads or writes it.
	hold *laneHold
	// waiting: the lane's sender waits for a row that is not due yet (a backoff, a platform's
	// retry_after, a plugin that is not connected), with nothing it may send now (Drain).
	waiting bool
}

// Start reconciles rows a previous run left "sending" (they become failed, never resent) and
// starts sending pending rows. It returns the reconciled rows, for the operator's log. With
// Options.Sweep set it also starts the sweeper (sweep).
func (l *Ledger) Start(ctx context.Context) ([]Row, error) {
	interrupted, err := l.reconcile(ctx, 0)
	if err != nil {
		return nil, err
	}
	halt := make(chan struct{})
	l.mu.Lock()
	l.running, l.ctx, l.halt = true, ctx, halt
	l.mu.Unlock()
	if err := l.wakePending(ctx, 0); err != nil {
		return interrupted, err
	}
	if l.opt.Sweep > 0 {
		l.wg.Add(1)
		go l.sweep(ctx, halt)
	}
	return interrupted, nil
}

// reconcile marks failed (outcome unknown, never resent) the rows left "sending" by a sender
// that is gone, among those last changed at least age ago. A row is sent inside its key's
// boundary and leaves "sending" before the boundary is released, so a row still "sending" once
// this host holds the boundary has no live sender: it belonged to a run that stopped, or to a
// host that died (PostgreSQL releases a dead host's locks with its connection).
func (l *Ledger) reconcile(ctx context.Context, age time.Duration) ([]Row, error) {
	now := l.opt.Now()
	stale, err := l.query(ctx, `WHERE state = $1 AND updated_at <= $2`, string(Sending), now.Add(-age).UnixMilli())
	if err != nil {
		return nil, err
	}
	var out []Row
	for _, r := range stale {
		var moved bool
		err := l.kernel.WithBoundary(ctx, r.Key, func(b *session.Boundary) error {
			res, err := l.db.ExecContext(b.Context(), `UPDATE deliveries SET state = $1, reason = $2, updated_at = $3 WHERE id = $4 AND state = $5 AND attempts = $6`,
				string(Failed), ReasonInterrupted, l.opt.Now().UnixMilli(), r.ID, string(Sending), r.Attempts)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			moved = n == 1
			return err
		})
		if err != nil {
			return out, err
		}
		if !moved {
			continue // its sender settled it meanwhile
		}
		r.State, r.Reason = Failed, ReasonInterrupted
		l.log.Warn("delivery reconciled: its sender stopped mid-send; outcome unknown, not resent",
			"id", r.ID, "key", r.Key, "chat", r.Target.ChatID)
		l.observe(r)
		l.finish(r)
		l.oweNotice(ctx, r, noticeUncertain)
		out = append(out, r)
	}
	return out, nil
}

// wakePending wakes the lanes that have pending rows due at least age ago.
func (l *Ledger) wakePending(ctx context.Context, age time.Duration) error {
	cut := l.opt.Now().Add(-age).UnixMilli()
	q := `SELECT DISTINCT lane FROM deliveries WHERE state = $1`
	args := []any{string(Pending)}
	if age > 0 {
		q += ` AND created_at <= $2 AND next_at <= $3`
		args = append(args, cut, cut)
	}
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	var lanes []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("delivery: reading pending lanes: %w", err)
		}
		lanes = append(lanes, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("delivery: reading pending lanes: %w", err)
	}
	for _, id := range lanes {
		l.wake(id)
	}
	return nil
}

// sweep runs while several hosts share the database (Options.Sweep), until ctx ends or Stop
// closes halt: every Sweep it takes over
// what a host that died left behind, its "sending" rows (reconciled) and the pending rows of its
// lanes (woken here; claim keeps two hosts from sending one row).
func (l *Ledger) sweep(ctx context.Context, halt <-chan struct{}) {
	defer l.wg.Done()
	t := time.NewTicker(l.opt.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-halt:
			return
		case <-t.C:
		}
		if _, err := l.reconcile(ctx, l.opt.Sweep); err != nil && ctx.Err() == nil {
			l.log.Warn("delivery: sweeping interrupted sends failed", "error", err)
		}
		if l.opt.Leases != nil {
			// Lanes whose host died holding them (FOR UPDATE SKIP LOCKED: each to one host).
			claims, err := l.opt.Leases.ClaimExpired(ctx, "lane:", 64)
			if err != nil && ctx.Err() == nil {
				l.log.Warn("delivery: claiming the lanes of stopped hosts failed", "error", err)
			}
			for _, c := range claims {
				l.wake(strings.TrimPrefix(c.Name, "lane:"))
			}
		}
		if err := l.wakePending(ctx, l.opt.Sweep); err != nil && ctx.Err() == nil {
			l.log.Warn("delivery: sweeping pending lanes failed", "error", err)
		}
	}
}

// Stop stops the senders after their current attempt, and the sweeper; a send in progress is not
// cut (Start's context may still be live: a draining host stops the ledger before it cancels
// the rest). Stop may be called again.
func (l *Ledger) Stop() {
	l.mu.Lock()
	if l.halt != nil {
		close(l.halt)
		l.halt = nil
	}
	l.running = false
	for _, ln := range l.lanes {
		select {
		case ln.kick <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// Drain waits until no lane has a message it may send now: each lane's sender has sent what
// was due and exited, or waits for a row due later (a backoff, a platform's retry_after, a
// platform that is not connected), which stays pending for the next start. It reports whether
// it got there before ctx ended. The senders go on meanwhile; Stop stops them.
func (l *Ledger) Drain(ctx context.Context) bool {
	for {
		l.mu.Lock()
		busy := false
		for _, ln := range l.lanes {
			busy = busy || ln.running && !ln.waiting
		}
		changed := l.settled
		l.mu.Unlock()
		if !busy {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// laneSettledLocked tells Drain that a lane exited or began to wait. l.mu must be held.
func (l *Ledger) laneSettledLocked() {
	close(l.settled)
	l.settled = make(chan struct{})
}

// setWaiting records whether ln's sender waits for a row due later (Drain).
func (l *Ledger) setWaiting(ln *lane, waiting bool) {
	l.mu.Lock()
	ln.waiting = waiting
	if waiting {
		l.laneSettledLocked()
	}
	l.mu.Unlock()
}

// wake makes sure the lane's sender runs.
func (l *Ledger) wake(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.running {
		return // Start loads pending rows
	}
	ln := l.lanes[id]
	if ln == nil {
		ln = &lane{id: id, kick: make(chan struct{}, 1)}
		l.lanes[id] = ln
	}
	if ln.running {
		select {
		case ln.kick <- struct{}{}:
		default:
		}
		return
	}
	ln.running = true
	l.wg.Add(1)
	go l.runLane(ln)
}

// runLane sends the lane's due rows one at a time, in order, and exits when none is left. With
// Options.Leases it runs only while this host holds the lane's lease (laneLease).
func (l *Ledger) runLane(ln *lane) {
	defer l.wg.Done()
	ctx := l.ctx
	hold, ok := l.acquireLane(ctx, ln)
	if !ok {
		l.exitLane(ln, true)
		return
	}
	ln.hold = hold // a later runLane of this lane starts after this one retired it (exitLane)
	for {
		l.mu.Lock()
		stopping := !l.running || ctx.Err() != nil
		l.mu.Unlock()
		if stopping {
			l.exitLane(ln, true)
			if hold != nil {
				// Stopping with rows left: let another host claim the lane now, not at expiry.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				l.opt.Leases.Release(rctx, hold.name, hold.fence)
				cancel()
			}
			return
		}
		if !hold.renew(ctx) {
			l.exitLane(ln, true)
			return
		}
		now := l.opt.Now()
		var (
			r    Row
			wait time.Duration
			ok   bool
			err  error
		)
		r, wait, ok, err = l.nextDue(ctx, ln.id, now)
		switch {
		case err != nil:
			l.log.Error("delivery: reading the ledger failed", "lane", ln.id, "error", err)
			wait = time.Second
		case ok:
			select {
			case l.sem <- struct{}{}:
			case <-ctx.Done():
				continue
			}
			l.attempt(ctx, ln, r)
			<-l.sem
			continue
		case wait == 0:
			if l.exitLane(ln, false) {
				l.releaseLane(ctx, ln, hold)
				return
			}
			continue
		}
		if hold != nil {
			wait = min(wait, hold.every) // wake to renew the lease
		}
		timer := time.NewTimer(wait)
		l.setWaiting(ln, true)
		select {
		case <-timer.C:
		case <-ln.kick:
		case <-ctx.Done():
		}
		l.setWaiting(ln, false)
		timer.Stop()
	}
}

// floodWait is how long r's chat is still under a platform's flood control (retry_after) that
// another lane of the chat met.
func (l *Ledger) floodWait(r Row) time.Duration {
	c := chatKey(r.Plugin, r.Profile, r.Target.ChatID)
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.chatBlocked[c]
	if !ok {
		return 0
	}
	now := l.opt.Now()
	if !now.Before(until) {
		delete(l.chatBlocked, c)
		return 0
	}
	return until.Sub(now)
}

// laneHold is a lane's lease while this host runs the lane (several hosts on one database).
type laneHold struct {
	l       *Ledger
	name    string
	fence   int64
	every   time.Duration // renewal period: a third of the lease
	renewed time.Time
}

// acquireLane takes the lane's lease when the ledger has Options.Leases; ok is false when
// another host holds it (its lane reads the rows this host enqueued from the database).
func (l *Ledger) acquireLane(ctx context.Context, ln *lane) (*laneHold, bool) {
	if l.opt.Leases == nil {
		return nil, true
	}
	name := "lane:" + ln.id
	fence, ok, err := l.opt.Leases.TryAcquire(ctx, name)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("delivery: taking a lane's lease failed; the sweeper tries again", "lane", ln.id, "error", err)
		}
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return &laneHold{l: l, name: name, fence: fence, every: l.opt.Leases.TTL() / 3, renewed: l.opt.Now()}, true
}

// renew renews the lease once a third of it has passed; false when the lease was lost (the lane
// must stop: another host may run it now).
func (h *laneHold) renew(ctx context.Context) bool {
	if h == nil || h.l.opt.Now().Sub(h.renewed) < h.every {
		return true
	}
	if err := h.l.opt.Leases.Renew(ctx, h.name, h.fence); err != nil {
		h.l.log.Warn("delivery: a lane's lease was lost; another host takes the lane over", "lane", h.name, "error", err)
		return false
	}
	h.renewed = h.l.opt.Now()
	return true
}

// releaseLane gives up an idle lane's lease, then looks again: a row another host enqueued while
// this one held the lease found the lease taken and left the lane to it.
func (l *Ledger) releaseLane(ctx context.Context, ln *lane, h *laneHold) {
	if h == nil {
		return
	}
	if err := l.opt.Leases.Delete(ctx, h.name, h.fence); err != nil && ctx.Err() == nil {
		l.log.Warn("delivery: releasing a lane's lease failed; it expires", "lane", ln.id, "error", err)
	}
	var one int
	err := l.db.QueryRowContext(ctx, `SELECT 1 FROM deliveries WHERE lane = $1 AND state = $2 LIMIT 1`, ln.id, string(Pending)).Scan(&one)
	if err == nil {
		l.wake(ln.id)
	}
}

// exitLane retires an idle lane unless work arrived meanwhile (then it reports false).
func (l *Ledger) exitLane(ln *lane, force bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !force {
		select {
		case <-ln.kick:
			return false
		default:
		}
	}
	ln.running = false
	if l.lanes[ln.id] == ln {
		delete(l.lanes, ln.id)
	}
	l.laneSettledLocked()
	return true
}

// nextDue returns the lane's oldest pending row that may be sent now (no earlier part of its
// message still open), or how long until one may be.
func (l *Ledger) nextDue(ctx context.Context, laneID string, now time.Time) (Row, time.Duration, bool, error) {
	sel, err := l.stmt(ctx, l.qNextDue)
	if err != nil {
		return Row{}, 0, false, err
	}
	r, err := scanRow(sel.QueryRowContext(ctx, laneID, now.UnixMilli()))
	switch {
	case err == nil:
		return r, 0, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Row{}, 0, false, err
	}
	// Nothing due: how long until the first retry is?
	var next sql.NullInt64
	at, err := l.stmt(ctx, qNextAt)
	if err != nil {
		return Row{}, 0, false, err
	}
	if err := at.QueryRowContext(ctx, laneID).Scan(&next); err != nil {
		return Row{}, 0, false, err
	}
	if !next.Valid {
		return Row{}, 0, false, nil
	}
	return Row{}, max(time.UnixMilli(next.Int64).Sub(now), time.Millisecond), false, nil
}

func (l *Ledger) backoff(attempts int) time.Duration {
	d := l.opt.Backoff
	for i := 1; i < attempts && d < l.opt.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, l.opt.MaxBackoff)
}

// attempt makes one delivery attempt of r inside its key's boundary.
func (l *Ledger) attempt(ctx context.Context, ln *lane, r Row) {
	if d := l.holdNotice(r); d > 0 {
		l.postpone(ctx, ln, r, d, false, "waiting for the platform to answer again") // not an attempt
		return
	}
	if d := l.floodWait(r); d > 0 {
		// Another lane of this chat met the platform's flood control after r was written.
		l.postpone(ctx, ln, r, d, false, "the chat is under the platform's flood control") // not an attempt
		return
	}
	if _, err := l.tr.Limit(r.Plugin); err != nil {
		if errors.Is(err, ErrPluginStarting) {
			l.retry(ctx, ln, r, time.Second, err.Error()) // not an attempt: nothing was tried
			return
		}
		r.Attempts++
		l.retry(ctx, ln, r, 0, err.Error())
		return
	}
	// The plugin instance first, then the boundary: never wait for an instance inside a boundary.
	sender, err := l.tr.Reserve(ctx, r.Plugin)
	if err != nil {
		r.Attempts++
		l.retry(ctx, ln, r, 0, "plugin unavailable: "+err.Error())
		return
	}
	defer sender.Release()
	err = l.kernel.WithBoundary(ctx, r.Key, func(b *session.Boundary) error {
		v := l.check(b, r)
		switch {
		case v.Kind == session.Stale:
			l.settle(ctx, r, Dropped, "stale: "+v.Reason+detail(v.Detail), nil, "")
			return nil
		case !v.Deliverable():
			l.retryUnverifiable(ctx, ln, r, v)
			return nil
		}
		// The check and the send are in this one critical section: no transition of this key
		// can happen between them.
		// On a shared database the boundary is a PostgreSQL lock held by a connection: make
		// sure it still is (a connection that broke released it) before claiming the row.
		if err := b.Verify(); err != nil {
			return err
		}
		r.Attempts++
		if claimed, err := l.claim(b.Context(), &r); err != nil || !claimed {
			return err // !claimed: dropped as withdrawn, or another sender (another host on a shared database) took it
		}
		l.pace(b.Context(), r)
		res, err := sender.Send(b.Context(), r.Profile, r.Target)
		if err == nil && (res.Error == nil || res.Error.Kind != abi.SendUncertain && res.Error.Code != abi.SendNotConnected) {
			l.answered(r.Plugin, r.Profile) // the platform answered: notices waiting for it may go
		}
		switch {
		case err != nil && errors.Is(err, ErrOutcomeUnknown):
			if l.settle(ctx, r, Failed, err.Error(), nil, "") {
				l.oweNotice(ctx, r, noticeUncertain)
			}
		case err != nil:
			l.retry(ctx, ln, r, 0, "plugin error: "+err.Error())
		case res.Error == nil:
			if res.ThreadID != nil && *res.ThreadID != r.Target.ThreadID {
				// The plugin sent it elsewhere (a deleted topic: to the chat itself). Record
				// where it went, not where it was meant to go.
				r.Target.ThreadID = *res.ThreadID
				l.setTarget(ctx, r)
			}
			if r.seed != "" {
				l.seedSession(b, r, &v)
			}
			if r.transcript != "" && v.SessionID != "" {
				role := r.tRole
				if role == "" {
					role = "assistant"
				}
				if _, err := b.Append(v.SessionID, session.Message{Role: role, Text: r.transcript}); err != nil {
					l.log.Warn("delivered, but the transcript append failed", "id", r.ID, "session", v.SessionID, "error", err)
				}
			}
			l.settle(ctx, r, Delivered, "", res.MessageIDs, v.SessionID)
		case res.Error.MigrateToChatID != "":
			l.migrate(b.Context(), r, res.Error.MigrateToChatID)
		case res.Error.Kind == abi.SendUncertain:
			if l.settle(ctx, r, Failed, "outcome unknown (not resent to avoid a duplicate): "+sendErr(res.Error), res.Error.Accepted, "") {
				l.oweNotice(ctx, r, noticeUncertain)
			}
		case res.Error.Kind == abi.SendRetryable && res.Error.Code == abi.SendNotConnected:
			l.waitConnected(ctx, ln, r, res.Error)
		case res.Error.Kind == abi.SendRetryable:
			l.retry(ctx, ln, r, time.Duration(res.Error.RetryAfterMs)*time.Millisecond, sendErr(res.Error))
		default:
			l.settle(ctx, r, Failed, sendErr(res.Error), res.Error.Accepted, "")
		}
		return nil
	})
	if err != nil {
		// The boundary or the store failed before the send: try again later.
		l.log.Warn("delivery attempt could not run", "id", r.ID, "key", r.Key, "error", err)
		l.retry(context.WithoutCancel(ctx), ln, r, 0, "store: "+err.Error())
	}
}

// seedSession appends r's seed to the session the verdict names, inside the send's boundary.
// A key with no session yet (an unguarded send into a chat the host has not seen) gets one, so
// the user's reply finds the seed. A failed seed is logged; the message was delivered.
func (l *Ledger) seedSession(b *session.Boundary, r Row, v *session.Verdict) {
	if v.SessionID == "" {
		k, err := l.kernel.ParseKey(r.Key)
		if err == nil {
			// The key names the platform and profile; the target has the routing fields (a key
			// alone cannot tell a participant from a shared thread).
			t := r.Target
			src := abi.Source{Platform: k.Platform, Profile: k.Profile, ChatType: t.ChatType, ChatID: t.ChatID,
				ThreadID: t.ThreadID, UserID: t.UserID, ScopeID: t.ScopeID}
			var res session.Resolution
			if res, err = b.Resolve(src, session.ResolveOptions{Internal: true}); err == nil {
				v.SessionID = res.SessionID
			}
		}
		if err != nil {
			l.log.Warn("delivered, but the seed's session could not be resolved", "id", r.ID, "key", r.Key, "error", err)
			return
		}
	}
	if _, err := b.Append(v.SessionID, session.Message{Role: "user", Text: r.seed}); err != nil {
		l.log.Warn("delivered, but the seed append failed", "id", r.ID, "session", v.SessionID, "error", err)
	}
}

func detail(d string) string {
	if d == "" {
		return ""
	}
	return " (" + d + ")"
}

func sendErr(e *abi.SendError) string {
	if e.Code != "" {
		return e.Kind + " " + e.Code + ": " + e.Message
	}
	return e.Kind + ": " + e.Message
}

// check is the guard, evaluated inside the boundary.
func (l *Ledger) check(b *session.Boundary, r Row) session.Verdict {
	switch r.Guard {
	case GuardLineage:
		return b.Classify(r.Stamp)
	case GuardWork:
		return b.ClassifyWork(r.Stamp, r.Generation)
	case GuardOwned:
		v := b.Classify(r.Stamp)
		if v.Deliverable() && !v.Owned() {
			return session.Verdict{Kind: session.Stale, Reason: ReasonNotOwned, Detail: "the pinned session no longer owns the chat (" + v.Reason + ")"}
		}
		return v
	}
	route, ok, err := b.Current()
	if err != nil {
		return session.Verdict{Kind: session.Unverifiable, Reason: session.ReasonStore, Detail: err.Error(), Err: err}
	}
	v := session.Verdict{Kind: session.DeliverCurrent, Reason: session.ReasonUnstamped}
	if ok {
		v.SessionID, v.Generation = route.SessionID, route.Generation
	}
	return v
}

// retry puts r back to pending after retryAfter (or the backoff), or fails it when it has used
// its attempts. A platform's retry_after blocks the whole chat. The row's write is a
// compare-and-set on what this host last saw of it; the chat-wide block is written only while
// this host still holds the lane's lease (with several hosts), checked in the same transaction.
func (l *Ledger) retry(ctx context.Context, ln *lane, r Row, retryAfter time.Duration, why string) {
	if r.Attempts >= l.opt.MaxAttempts {
		l.settle(ctx, r, Failed, fmt.Sprintf("gave up after %d attempts: %s", r.Attempts, why), nil, "")
		return
	}
	wait := retryAfter
	if wait <= 0 {
		wait = l.backoff(max(r.Attempts, 1))
	}
	l.postpone(ctx, ln, r, wait, retryAfter > 0, why)
}

// postpone puts r back to pending, due after wait; block makes the whole chat wait as long (a
// platform's retry_after). It reports whether the row was still as this host last saw it.
func (l *Ledger) postpone(ctx context.Context, ln *lane, r Row, wait time.Duration, block bool, why string) bool {
	next := l.opt.Now().Add(wait)
	var ok bool
	err := l.durably(func() error {
		return store.Update(ctx, l.db, store.PathLedger, func(tx *store.Tx) error {
			res, err := l.exec(ctx, tx, qRetry, string(Pending), why, r.Attempts, next.UnixMilli(), l.opt.Now().UnixMilli(), r.ID,
				string(r.stored.state), r.stored.attempts)
			if err != nil {
				return err
			}
			if ok = applied(res); !ok {
				return nil
			}
			if !block {
				return nil
			}
			if h := ln.hold; h != nil {
				fence, held, err := l.opt.Leases.Fence(ctx, tx, h.name)
				if err != nil {
					return err
				}
				if !held || fence != h.fence {
					return nil // the lane is another host's now: its sender meets the platform's limit itself
				}
			}
			// Flood control is per chat: nothing else goes to this chat before then, from any lane.
			_, err = tx.ExecContext(ctx, `UPDATE deliveries SET next_at = $1 WHERE plugin = $2 AND profile = $3 AND chat_id = $4 AND state = $5 AND next_at < $6`,
				next.UnixMilli(), r.Plugin, r.Profile, r.Target.ChatID, string(Pending), next.UnixMilli())
			return err
		})
	})
	if err != nil {
		l.log.Error("delivery: recording a retry failed", "id", r.ID, "error", err)
		return false
	}
	if !ok {
		l.overtaken(r, "the retry")
		return false
	}
	if block {
		l.mu.Lock()
		c := chatKey(r.Plugin, r.Profile, r.Target.ChatID)
		if next.After(l.chatBlocked[c]) {
			l.chatBlocked[c] = next
		}
		l.mu.Unlock()
	}
	r.State, r.Reason, r.NextAttempt, r.stored = Pending, why, next, stored{Pending, r.Attempts}
	l.observe(r)
	// Every failed attempt is visible to the operator as it happens, not only the final outcome.
	l.log.Warn("delivery attempt failed; will retry", "id", r.ID, "key", r.Key, "plugin", r.Plugin,
		"attempt", r.Attempts, "of", l.opt.MaxAttempts, "retry_in", wait.Round(time.Millisecond), "reason", why)
	return true
}

func (l *Ledger) retryUnverifiable(ctx context.Context, ln *lane, r Row, v session.Verdict) {
	r.Attempts++
	if r.Attempts >= l.opt.MaxAttempts {
		l.settle(ctx, r, Dropped, "unverifiable: "+v.Reason+detail(v.Detail), nil, "")
		return
	}
	l.retry(ctx, ln, r, 0, "unverifiable: "+v.Reason)
}

// PaceEdits bounds the drafts and edits (streamed answers) one bot, a plugin's profile, sends
// over all its chats to perSecond (0: unbounded). The streamer spaces them already when it
// starts each one (turn.Options.EditsPerSecond); the ledger keeps the spacing at the moment of
// the send, which the store's writes in between (a claim that waited for a lock) would
// otherwise squeeze.
func (l *Ledger) PaceEdits(perSecond float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.editGap = 0
	if perSecond > 0 {
		l.editGap = time.Duration(float64(time.Second) / perSecond)
	}
}

// pace waits, right before r is sent, until its bot may send a draft or an edit again
// (PaceEdits); other messages go at once. Each waiting send takes the next free slot, so
// concurrent lanes of one bot are spaced too. The wait is short (the streamer spaced the
// sends already) and happens with r claimed: a crash during it leaves a draft "outcome
// unknown", which the draft rule handles.
func (l *Ledger) pace(ctx context.Context, r Row) {
	if r.Kind != KindDraft && r.Target.EditMessageID == "" {
		return
	}
	bot := r.Plugin + "\x00" + r.Profile
	l.mu.Lock()
	if l.editGap <= 0 {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	slot := now
	if next := l.editNext[bot]; next.After(slot) {
		slot = next
	}
	l.editNext[bot] = slot.Add(l.editGap)
	l.mu.Unlock()
	if d := slot.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// claim moves r from pending to sending, inside its key's boundary, right before the send. It
// reports false, changing nothing, when r is no longer as this lane read it: with several hosts
// on one database another host's lane may have sent it since. The boundary makes the claim and
// the send one critical section, so a row is sent at most once.
//
// A row about a subject (Message.About) is claimed only while its subject has not been
// withdrawn, in the same statement; one whose subject was withdrawn is dropped instead, with
// the withdrawal's reason, and claim reports false.
func (l *Ledger) claim(ctx context.Context, r *Row) (bool, error) {
	var (
		res sql.Result
		err error
	)
	if r.About == "" {
		res, err = l.exec(ctx, nil, qClaim, r.Attempts, l.opt.Now().UnixMilli(), r.ID, string(r.stored.state), r.stored.attempts)
	} else {
		res, err = l.exec(ctx, nil, qClaimAbout, r.Attempts, l.opt.Now().UnixMilli(), r.ID, string(r.stored.state), r.stored.attempts, r.About)
	}
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err == nil && r.About != "" {
			err = l.dropWithdrawn(ctx, *r)
		}
		return false, err
	}
	r.State, r.Reason, r.stored = Sending, "", stored{Sending, r.Attempts}
	l.observe(*r)
	return true, nil
}

// dropWithdrawn drops r (which claim did not take) if its subject was withdrawn; if not, the
// row changed under this host and is left to whoever changed it.
func (l *Ledger) dropWithdrawn(ctx context.Context, r Row) error {
	why, ok, err := store.Withdrawn(ctx, l.db, r.About)
	if err != nil || !ok {
		return err
	}
	r.Attempts = r.stored.attempts // not an attempt: nothing was tried
	l.settle(ctx, r, Dropped, "suppressed: "+why, nil, "")
	return nil
}

// durably runs write, a write recording what happened to a row this host holds ("sending": the
// platform's answer to a send, or that it was not sent), again and again with backoff while the
// store refuses writes (a lock held, a full disk: store.Refused), until it takes it or the ledger
// stops. Given up, the row would stay "sending" until a restart reconciled it as "outcome
// unknown": a reply certainly not sent would then never be sent, and a delivered one reported
// uncertain. It runs inside the key's boundary, which waits meanwhile; nothing else of that chat
// could be written anyway.
func (l *Ledger) durably(write func() error) error {
	wait := 50 * time.Millisecond
	for {
		err := write()
		if err == nil || !store.Refused(err) {
			return err
		}
		store.Report(l.db, store.PathLedger, err)
		l.mu.Lock()
		stopping := !l.running || l.ctx == nil || l.ctx.Err() != nil
		l.mu.Unlock()
		if stopping {
			return err
		}
		l.log.Warn("delivery: the store refuses writes; recording an outcome again", "retry_in", wait, "error", err)
		time.Sleep(wait)
		wait = min(2*wait, 2*time.Second)
	}
}

// applied reports whether a compare-and-set write of one row applied. When it did not, the row
// was no longer as this host last saw it: another host's lane took the lane over after this
// one's lease lapsed, and sent or settled the row. This host then records nothing over what the
// new owner did (overtaken says so in the log).
func applied(res sql.Result) bool {
	n, err := res.RowsAffected()
	return err == nil && n == 1
}

// overtaken logs a write of r that did not apply because another host changed the row.
func (l *Ledger) overtaken(r Row, what string) {
	l.log.Warn("delivery: the row changed under this host (another host took its lane over); "+what+" not recorded",
		"id", r.ID, "key", r.Key, "expected_state", r.stored.state, "expected_attempts", r.stored.attempts)
}

// settle moves r to a final state (compare-and-set on r.stored). It reports whether it did.
func (l *Ledger) settle(ctx context.Context, r Row, s State, reason string, ids []string, sessionID string) bool {
	idsJSON := ""
	if len(ids) > 0 {
		b, _ := json.Marshal(ids) // a []string always encodes
		idsJSON = string(b)
	}
	ctx = context.WithoutCancel(ctx) // an outcome that happened is recorded even while stopping
	var res sql.Result
	err := l.durably(func() (err error) {
		res, err = l.exec(ctx, nil, qSettle, string(s), reason, r.Attempts, idsJSON, sessionID, l.opt.Now().UnixMilli(), r.ID,
			string(r.stored.state), r.stored.attempts)
		return err
	})
	if err != nil {
		l.log.Error("delivery: recording an outcome failed", "id", r.ID, "state", s, "error", err)
		return false
	}
	if !applied(res) {
		l.overtaken(r, "the outcome "+string(s))
		return false
	}
	if s == Dropped || s == Failed {
		l.log.Info("delivery "+string(s), "id", r.ID, "key", r.Key, "kind", r.Kind, "reason", reason)
	}
	r.State, r.Reason, r.MessageIDs, r.SessionID, r.stored = s, reason, ids, sessionID, stored{s, r.Attempts}
	l.observe(r)
	l.finish(r)
	return true
}

// setTarget records r's target (after the plugin reported where the message really went); r is
// the row this host is sending.
func (l *Ledger) setTarget(ctx context.Context, r Row) {
	b, _ := json.Marshal(r.Target)
	res, err := l.db.ExecContext(context.WithoutCancel(ctx), `UPDATE deliveries SET target = $1 WHERE id = $2 AND state = $3 AND attempts = $4`,
		string(b), r.ID, string(r.stored.state), r.stored.attempts)
	if err != nil {
		l.log.Error("delivery: recording the thread a message went to failed", "id", r.ID, "error", err)
		return
	}
	if !applied(res) {
		l.overtaken(r, "the thread it went to")
	}
}

// migrate handles a send refused because its chat moved (a Telegram group upgraded to a
// supergroup): the chat is re-addressed (r, which this host is sending, and the rest of its
// lane go back to pending for the new chat), and the session kernel is told that the new chat
// continues the old one's conversations, so that the supergroup's messages carry on where the
// group left off. It runs inside r's boundary (the alias takes no key lock).
func (l *Ledger) migrate(ctx context.Context, r Row, newChat string) {
	old := r.Target.ChatID
	if k, err := l.kernel.ParseKey(r.Key); err == nil {
		if aliased, err := l.kernel.AliasChat(ctx, k.Platform, k.Profile, newChat, old); err != nil {
			l.log.Warn("chat migrated, but recording the conversation's continuation failed", "key", r.Key, "to", newChat, "error", err)
		} else if aliased {
			l.log.Info("chat migrated; its conversations continue in the new chat", "key", r.Key, "from", old, "to", newChat)
		}
	}
	l.moveChat(ctx, &r, r.Plugin, r.Profile, old, newChat)
}

// MigrateChat re-addresses a chat that moved (a Telegram group upgraded to a supergroup): every
// pending row for the old chat goes to the new id, due at once (a flood wait was the old chat's),
// as will future messages. Recording the same migration again is harmless.
func (l *Ledger) MigrateChat(ctx context.Context, plugin, profile, old, newChat string) {
	l.moveChat(ctx, nil, plugin, profile, old, newChat)
}

// moveChat is MigrateChat, and also puts sending (the row whose send was refused because the
// chat moved; nil for none) back to pending for the new chat. Rows another sender holds
// ("sending") are not touched: their sender settles them.
func (l *Ledger) moveChat(ctx context.Context, sending *Row, plugin, profile, old, newChat string) {
	ctx = context.WithoutCancel(ctx)
	oldChat := chatKey(plugin, profile, old)
	var lanes []string // the lanes of the rows moved: due at once now
	err := store.Update(ctx, l.db, store.PathLedger, func(tx *store.Tx) error {
		lanes = lanes[:0]
		if _, err := tx.ExecContext(ctx, `INSERT INTO chat_migrations (plugin, profile, chat_id, new_chat_id) VALUES ($1, $2, $3, $4)
			ON CONFLICT (plugin, profile, chat_id) DO UPDATE SET new_chat_id = excluded.new_chat_id`,
			plugin, profile, old, newChat); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, target, state, attempts, lane FROM deliveries
			WHERE plugin = $1 AND profile = $2 AND chat_id = $3 AND state IN ('pending', 'sending')`, plugin, profile, old)
		if err != nil {
			return err
		}
		type upd struct {
			id, target, lane string
			was              stored
		}
		var ups []upd
		for rows.Next() {
			var (
				u     upd
				state string
			)
			if err := rows.Scan(&u.id, &u.target, &state, &u.was.attempts, &u.lane); err != nil {
				rows.Close()
				return err
			}
			u.was.state = State(state)
			if u.was.state == Sending && (sending == nil || u.id != sending.ID || u.was != sending.stored) {
				continue // another sender's: it settles the row, and a refusal brings it here again
			}
			ups = append(ups, u)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, u := range ups {
			var t abi.OutboundMessage
			if err := json.Unmarshal([]byte(u.target), &t); err != nil {
				return fmt.Errorf("row %s: corrupt target: %w", u.id, err)
			}
			t.ChatID = newChat
			b, err := json.Marshal(t)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET target = $1, chat_id = $2, state = $3, reason = $4, next_at = 0, updated_at = $5
				WHERE id = $6 AND state = $7 AND attempts = $8`,
				string(b), newChat, string(Pending), "chat migrated from "+old, l.opt.Now().UnixMilli(), u.id, string(u.was.state), u.was.attempts); err != nil {
				return err
			}
			lanes = append(lanes, u.lane)
		}
		return nil
	})
	if err != nil {
		l.log.Error("delivery: recording a chat migration failed", "plugin", plugin, "from", old, "to", newChat, "error", err)
		return
	}
	l.migMu.Lock()
	known := l.moved[oldChat] == newChat
	l.moved[oldChat] = newChat
	l.migMu.Unlock()
	if !known {
		l.log.Info("chat migrated; re-addressing its messages", "plugin", plugin, "from", old, "to", newChat)
	}
	l.mu.Lock()
	delete(l.chatBlocked, oldChat) // a flood wait was the old chat's
	l.mu.Unlock()
	for _, ln := range lanes {
		l.wake(ln)
	}
}
