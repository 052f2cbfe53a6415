package process

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// Takeover by another host.
//
// With several hosts on one database each process row names the host that runs it (Info.Host,
// the host's lease instance id). That host alone watches the process (its pid is on its machine,
// its log file in its data directory). When the host stops for good, nobody would ever record the
// end: so when a survivor takes a stopped host's work over (it claimed the host's expired lease),
// it records that host's open processes as lost, reason host_lost, under its own id, and queues
// their "lost, outcome unknown" completion in the same transaction (TakeOver). Each row is
// written with a compare-and-set on its generation and host, so of two survivors (one claim of
// the lease each, the second after the first died mid-way) the process is announced once.
//
// The host may not have stopped: it may have been paused (SIGSTOP, a VM freeze, a partition) and
// come back with its registry still tracking the process, or have restarted with the same data
// directory (its Recover finds the process alive, or its exit file). Then the rule is:
//
//   - a write made on the strength of owning the row (a checkpoint of the returning host) applies
//     only while the row still names that host (upsertRow), so nothing the survivor recorded is
//     overwritten blindly;
//   - a write that does not apply because the row was taken over while the process was still
//     this host's (state lost, reason host_lost, written by another host, and the write is newer
//     than what the survivor saw) is written anyway, as a reconciliation: the host that runs the
//     process is the one that knows its truth (reconcileRow). It is not swallowed as a stale
//     generation;
//   - a reconciliation that finds the process still running makes the row running again and
//     withdraws the lost notice if it is still queued (withdrawLost): the real end follows;
//   - the real end's completion takes the place of the lost notice if that notice was not
//     handed out yet (pending, or withdrawn): the chat hears once. If it was (claimed, delivered,
//     dropped, or consumed by the agent), the real end is queued once more as an EventCorrection,
//     worded as correcting the earlier notice (a unique index allows one per process). A real
//     end that is itself unknown (the pid is gone, no exit file) adds nothing to "lost" and is
//     not announced again (supersedeLost).
//
// Rows written by any other host than the expected one, and not as a takeover, are never
// overwritten: the write fails with ErrTakenOver (logged with what it carried).

// outcomeWithdrawn is the queue outcome of a lost notice withdrawn because its process turned
// out to be running: the notice is final (suppressed) but is replaced by the real end.
const outcomeWithdrawn = "withdrawn: the host running it came back"

// Hosts returns the hosts other than this one that the checkpoint names as running processes
// (starting or running). With several hosts, one of them that has no lease started a process
// after another took it over, and then stopped: nobody would record that process's end (the
// gateway's sweep looks for such hosts).
func (r *Registry) Hosts(ctx context.Context) ([]string, error) {
	return store.Strings(ctx, r.db, `SELECT DISTINCT host FROM processes WHERE state IN ($1, $2) AND host <> $3`,
		string(StateStarting), string(StateRunning), r.host)
}

// TakeOver records the open processes of host dead as lost (reason host_lost), with their
// completions, in one transaction. The caller has established that dead stopped: it claimed
// dead's expired host lease (one claimer per lease). It returns how many processes it recorded.
// Calling it again finds nothing left to record.
func (r *Registry) TakeOver(ctx context.Context, dead string) (int, error) {
	if dead == "" || dead == r.host {
		return 0, nil
	}
	now := r.now()
	var n int
	err := store.Update(ctx, r.db, store.PathProcesses, func(sqlTx *store.Tx) error {
		n = 0
		rows, err := sqlTx.QueryContext(ctx, `SELECT `+rowColumns+` FROM processes WHERE host = $1 AND state IN ($2, $3)`,
			dead, string(StateStarting), string(StateRunning))
		if err != nil {
			return err
		}
		var open []Info
		for rows.Next() {
			in, err := scanRow(rows)
			if errors.Is(err, ErrCorrupt) {
				// Its stamp cannot be trusted to route a notice: left as it is, as Recover does.
				r.log.Error("process: takeover: checkpoint cannot be decoded; left untouched", "id", in.ID, "err", err)
				continue
			}
			if err != nil {
				rows.Close()
				return err
			}
			open = append(open, in)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		tx := newStmtTx(sqlTx)
		for _, in := range open {
			res, err := tx.exec(ctx, `UPDATE processes SET state = $1, reason = $2, exit_code = NULL, signal = '',
				ended_at = $3, host = $4, owner = $5, updated_at = $6
				WHERE id = $7 AND gen = $8 AND host = $9 AND state IN ($10, $11)`,
				string(StateLost), ReasonHostLost, now.UnixMilli(), r.host, selfIdentity(), now.UnixMilli(),
				in.ID, in.Gen, dead, string(StateStarting), string(StateRunning))
			if err != nil {
				return fmt.Errorf("process: takeover of %s: %w", in.ID, err)
			}
			if k, err := res.RowsAffected(); err != nil || k == 0 {
				continue // recorded meanwhile (on PostgreSQL the transaction is run again instead)
			}
			ev := Event{
				Kind: EventCompletion, ProcID: in.ID, Command: in.Command, Stamp: in.Stamp, StartedAt: in.StartedAt,
				At: now, State: StateLost, Reason: ReasonHostLost, Notify: in.NotifyOnComplete,
				Message: "the host running it (" + dead + ") stopped; its outcome is unknown",
			}
			state := qPending
			if in.Consumed {
				state = qSuppressed
			}
			if ins, err := insertEvent(ctx, tx, &ev, state, now); err != nil {
				return err
			} else if !ins {
				// Withdrawn once already (the host came back, then stopped again): queued again.
				if _, err := supersedeLost(ctx, tx, &ev, state, now); err != nil {
					return err
				}
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("process: taking over the processes of host %s: %w", dead, err)
	}
	if n > 0 {
		r.log.Warn("process: recorded the processes of a host that stopped as lost", "host", dead, "processes", n)
		r.q.signal()
	}
	return n, nil
}

// reconcileRow is called when a checkpoint of a process this host runs did not apply. It reads
// the stored row: if another host recorded it as lost by a takeover (see "Takeover by another
// host") before this write, the write is applied over that record and reclaimed is true; if the
// row names this host's expected host, the write was merely stale (an older snapshot) and nothing
// happens; otherwise other names the host that holds the row.
func reconcileRow(ctx context.Context, tx *stmtTx, in *Info, from string, now time.Time) (reclaimed bool, other string, err error) {
	var (
		gen                 int64
		host, state, reason string
	)
	if err := tx.tx.QueryRowContext(ctx, `SELECT gen, host, state, reason FROM processes WHERE id = $1`, in.ID).
		Scan(&gen, &host, &state, &reason); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, "", nil // pruned
		}
		return false, "", err
	}
	switch {
	case host == from:
		return false, "", nil // stale: a newer snapshot of ours is stored
	case State(state) == StateLost && reason == ReasonHostLost && in.Gen > gen:
		applied, err := writeRow(ctx, tx, in, host, now)
		return applied, "", err
	case State(state) == StateLost && reason == ReasonHostLost:
		return false, "", nil // an older snapshot of ours; a newer one follows and reconciles
	}
	return false, host, nil
}

// withdrawLost withdraws the lost notice of process id if it is still queued: the process turned
// out to be running. It stays final (suppressed) until the real end replaces it (supersedeLost).
func withdrawLost(ctx context.Context, tx *stmtTx, id string, now time.Time) error {
	_, err := tx.exec(ctx, `UPDATE process_events SET state = $1, outcome = $2, updated_at = $3
		WHERE proc_id = $4 AND kind = $5 AND state = $6`,
		qSuppressed, outcomeWithdrawn, now.UnixMilli(), id, string(EventCompletion), qPending)
	return err
}

// supersedeLost is called when ev, a completion, could not be inserted because the process has a
// completion already. If that one is a lost notice of a takeover, ev takes its place when it was
// not handed out (pending or withdrawn), or else is queued as the process's one correction; see
// "Takeover by another host". It reports whether an event was queued in state.
func supersedeLost(ctx context.Context, tx *stmtTx, ev *Event, state string, now time.Time) (bool, error) {
	var (
		seq                     int64
		prevState, outcome, raw string
	)
	err := tx.tx.QueryRowContext(ctx, `SELECT seq, state, outcome, payload FROM process_events
		WHERE proc_id = $1 AND kind = $2`, ev.ProcID, string(EventCompletion)).Scan(&seq, &prevState, &outcome, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var prev Event
	if err := json.Unmarshal([]byte(raw), &prev); err != nil {
		return false, fmt.Errorf("process: event %d: %w", seq, err)
	}
	if prev.State != StateLost || prev.Reason != ReasonHostLost {
		return false, nil // the process's one completion exists: this is a repeat
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return false, err
	}
	if prevState == qPending || (prevState == qSuppressed && outcome == outcomeWithdrawn) {
		newOutcome := ""
		if state == qSuppressed {
			newOutcome = "consumed"
		}
		res, err := tx.exec(ctx, `UPDATE process_events SET payload = $1, state = $2, outcome = $3, token = '',
			lease_until = 0, not_before = 0, updated_at = $4 WHERE seq = $5 AND state = $6 AND outcome = $7`,
			string(payload), state, newOutcome, now.UnixMilli(), seq, prevState, outcome)
		if err != nil {
			return false, fmt.Errorf("process: replacing the lost notice of %s: %w", ev.ProcID, err)
		}
		k, err := res.RowsAffected()
		return k > 0, err
	}
	if ev.State == StateLost && ev.ExitCode == nil {
		return false, nil // still unknown: the chat heard "lost" already
	}
	corr := *ev
	corr.Kind = EventCorrection
	return insertEvent(ctx, tx, &corr, state, now)
}

// Reassert writes a checkpoint of every process this host runs. The host calls it when it holds
// its host lease again after losing it (it was paused, or cut off from the database, past the
// lease): another host may have recorded its processes as lost meanwhile, and each checkpoint
// then reconciles the row (a running process is running again, and its still queued lost notice
// is withdrawn). It returns how many rows it reconciled.
func (r *Registry) Reassert(ctx context.Context) (int, error) {
	var ops []*op
	for _, p := range r.snapshot(nil) {
		p.mu.Lock()
		if !p.info.State.Final() {
			ops = append(ops, r.checkpointLocked(p, nil))
		}
		p.mu.Unlock()
	}
	n := 0
	var firstErr error
	for _, o := range ops {
		select {
		case <-o.done:
		case <-ctx.Done():
			return n, ctx.Err()
		}
		if o.err != nil && firstErr == nil {
			firstErr = o.err
		}
		if o.reclaimed {
			n++
		}
	}
	if n > 0 {
		r.log.Warn("process: processes recorded as lost while this host was away are running; reconciled", "processes", n)
	}
	return n, firstErr
}

// ownsLog reports whether this host's data directory holds process id's log file: the process
// was started from this data directory (by this host, or by an earlier run of it).
func (r *Registry) ownsLog(id string) bool {
	_, err := os.Stat(r.logPath(id))
	return err == nil
}
