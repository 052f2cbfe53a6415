package process

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RecoverReport says what Recover found.
type RecoverReport struct {
	Adopted   []string // re-adopted: pid alive with the recorded start time
	Exited    int      // ended while the host was down, exit status known from the exit file
	Lost      int      // gone (or pid reused, or spawn interrupted) with no known exit status
	Killed    int      // a kill was in progress when the host stopped, and the process is gone
	Skipped   int      // tracked already, or checkpointed by another live host
	Reclaimed int64    // event claims of the previous host returned to pending
	Corrupt   []string // checkpoints that could not be decoded (left untouched, logged)
	// Retaken are processes of this data directory that another host recorded as lost while
	// this directory's host was away; they are adopted or ended above like any open process,
	// reconciling the lost record (see "Takeover by another host").
	Retaken []string
}

// Recover runs once at host start. For every checkpoint still starting or running:
//
//   - still starting (the host stopped between starting the process and recording its pid):
//     the process is looked for in /proc by the HERMES_PROCESS_ID of its environment, and is
//     then treated like a running one; if it is not found it ended (exit file) or is lost;
//   - pid alive with the recorded kernel start time: re-adopted. It is watched by polling /proc
//     (it is not our child), its output is read on from its log file, and its end is reported
//     with the status from its exit file, or as unknown;
//   - pid gone, a zombie, or now another process (start time differs): it ended while the host
//     was down. It is never signalled. Its completion is produced once, with the status from
//     its exit file if the wrapper wrote one, else as lost.
//
// Events a previous host claimed but did not acknowledge are handed out again. Completions
// that were produced but not delivered stay queued and are delivered once.
func (r *Registry) Recover(ctx context.Context) (RecoverReport, error) {
	var rep RecoverReport
	var err error
	if rep.Reclaimed, err = r.q.releaseAll(ctx); err != nil {
		return rep, fmt.Errorf("process: recover: %w", err)
	}
	// Open checkpoints, and processes another host recorded as lost because it took this data
	// directory's previous host over (host_lost): if they are this directory's, their truth is
	// here (see "Takeover by another host").
	rows, err := r.db.QueryContext(ctx, `SELECT `+rowColumns+` FROM processes WHERE state IN (?, ?) OR (state = ? AND reason = ?)`,
		string(StateStarting), string(StateRunning), string(StateLost), ReasonHostLost)
	if err != nil {
		return rep, fmt.Errorf("process: recover: %w", err)
	}
	var open []Info
	lostRows := map[string]bool{} // recorded as lost by a takeover
	for rows.Next() {
		in, err := scanRow(rows)
		if errors.Is(err, ErrCorrupt) {
			// Neither adopted nor reported as ended: its stamp cannot be trusted. The row stays
			// as it is for the operator; the host starts.
			r.log.Error("process: recover: checkpoint cannot be decoded; left untouched", "id", in.ID, "err", err)
			rep.Corrupt = append(rep.Corrupt, in.ID)
			continue
		}
		if err != nil {
			rows.Close()
			return rep, fmt.Errorf("process: recover: %w", err)
		}
		if in.State == StateLost {
			// Taken over while it was this directory's (below: only if its log file is here):
			// to the survivor it vanished; what it really is, is found out as for any open row.
			in.State, in.Reason, in.EndedAt, in.ExitCode, in.Signal = StateRunning, "", time.Time{}, nil, ""
			if in.PID == 0 {
				in.State = StateStarting
			}
			lostRows[in.ID] = true
		}
		open = append(open, in)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("process: recover: %w", err)
	}

	// A checkpoint still "starting" may belong to a process that did start: find it by the
	// HERMES_PROCESS_ID in its environment.
	starting := map[string]bool{}
	for _, in := range open {
		if in.State == StateStarting {
			starting[in.ID] = true
		}
	}
	var orphans map[string]spawnedProc
	if len(starting) > 0 {
		orphans = findSpawned(starting)
	}

	var ops []*op
	now := r.now()
	foreign := map[string]bool{} // writer identity → alive elsewhere; usually one previous host
	for _, in := range open {
		taken := lostRows[in.ID]
		if (taken || (r.host != "" && in.Host != "" && in.Host != r.host)) && !r.ownsLog(in.ID) {
			// Another host's process (several hosts on one database): its log file is in that
			// host's data directory, its pid on that host's machine. That host, or a survivor
			// taking it over when it stops, records its end. (A lost row of another host's is
			// not open: not counted.)
			if !taken {
				rep.Skipped++
			}
			continue
		}
		if !taken { // a taken-over row names the survivor, which does not run it
			elsewhere, ok := foreign[in.Owner]
			if !ok {
				elsewhere = ownerAliveElsewhere(in.Owner)
				foreign[in.Owner] = elsewhere
			}
			if elsewhere {
				rep.Skipped++
				continue
			}
		}
		if r.lookup(in.ID) != nil {
			rep.Skipped++
			continue
		}
		if taken {
			rep.Retaken = append(rep.Retaken, in.ID)
		}
		exitPath := r.exitPath(in.ID)
		st := endStatus{state: StateLost, reason: ReasonSpawnCrash}
		if o, ok := orphans[in.ID]; ok {
			in.State, in.PID, in.StartTicks = StateRunning, o.pid, o.startTicks
		} else if code, ok := readExitFile(exitPath); ok && in.State == StateStarting {
			st = endStatus{state: StateExited, code: code, reason: ReasonExitWhileDown}
		}
		if in.State == StateRunning {
			l, err := checkLive(in.PID, in.StartTicks)
			if err != nil {
				r.log.Warn("process: recover: cannot check pid; left for the next start", "id", in.ID, "err", err)
				rep.Skipped++
				continue
			}
			if l == alive {
				ops = append(ops, r.adopt(in))
				rep.Adopted = append(rep.Adopted, in.ID)
				continue
			}
			st.reason = ReasonGone
			if l == recycled {
				st.reason = ReasonRecycled
			}
			if code, ok := readExitFile(exitPath); ok {
				st = endStatus{state: StateExited, code: code, reason: ReasonExitWhileDown}
			}
			if in.Reason != "" { // a kill was requested before the host stopped
				st.state, st.reason = StateKilled, in.Reason
			}
		}
		switch st.state {
		case StateExited:
			rep.Exited++
		case StateKilled:
			rep.Killed++
		default:
			rep.Lost++
		}
		ops = append(ops, r.endStored(in, st, now))
	}
	var firstErr error
	for _, o := range ops {
		if err := o.wait(); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("process: recover: %w", err)
		}
	}
	return rep, firstErr
}

// adopt takes over a live process checkpointed by a previous host (or recorded as lost by a host
// that took the previous one over: the write expects the host the row names, either way).
func (r *Registry) adopt(in Info) *op {
	p := &proc{
		id: in.ID, logPath: r.logPath(in.ID), exitPath: r.exitPath(in.ID),
		done: make(chan struct{}), ring: newRing(r.opt.BufferBytes), info: in, killWhy: in.Reason,
	}
	from := in.Host
	p.info.Adopted, p.info.Host = true, r.host
	p.watch.delivered = in.WatchMatches
	f, off, err := refill(p.logPath, &p.ring)
	if err != nil {
		r.log.Warn("process: recover: log file unreadable; output before now is lost", "id", in.ID, "err", err)
	}
	p.logf, p.readOff = f, off
	if f != nil {
		p.punched = dataStart(f, off) &^ (logBlock - 1)
	}
	r.mu.Lock()
	r.procs[p.id] = p
	r.running++
	r.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	o := r.snapshotLocked(p, nil)
	o.from, o.takeover = from, true
	return r.w.submit(o)
}

// endStored records the end of a process that is only in the checkpoint, with its completion. If
// another host recorded it as lost, this end replaces or corrects that notice (supersedeLost).
func (r *Registry) endStored(in Info, st endStatus, now time.Time) *op {
	from := in.Host
	in.Host = r.host
	in.State, in.ExitCode, in.Signal, in.Reason, in.EndedAt = st.state, st.code, st.signal, st.reason, now
	if in.OutputChars <= 0 {
		in.OutputChars = r.opt.TailChars
	}
	logPath := r.logPath(in.ID)
	tail, cut, size, rerr := fileTail(logPath, in.OutputChars)
	in.OutputBytes = size
	in.Gen++
	in.Owner = selfIdentity()
	ev := Event{
		Kind: EventCompletion, ProcID: in.ID, Command: in.Command, Stamp: in.Stamp, StartedAt: in.StartedAt,
		At: now, State: in.State, ExitCode: in.ExitCode, Reason: in.Reason, Notify: in.NotifyOnComplete,
		Output: tail, OutputCut: cut,
	}
	qe := queuedEvent{ev: ev, state: qPending}
	if in.Consumed {
		qe.state = qSuppressed
	}
	if rerr != nil {
		qe.ev.Output = withUnread(tail, rerr)
		qe.tailFrom, qe.tailChars = logPath, in.OutputChars
	}
	return r.w.submit(&op{row: &in, events: []queuedEvent{qe}, from: from, truth: true, takeover: true})
}
