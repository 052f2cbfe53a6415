package process

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

const pruneEvery = time.Hour

// loop is the registry's one housekeeping goroutine. Every PollInterval it reads new output of
// running processes (watch patterns), checks re-adopted processes for their end (they are not
// our children, so nothing else tells us), kills processes past their maximum age, releases the
// global watch breaker and forgets processes that ended more than FinishedTTL ago. Every hour
// it prunes old checkpoints, events and log files.
func (r *Registry) loop() {
	defer close(r.loopDone)
	t := time.NewTicker(r.opt.PollInterval)
	defer t.Stop()
	var (
		batch     []*proc
		lastPrune time.Time
	)
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		now := r.now()
		batch = r.snapshot(batch[:0])
		for _, p := range batch {
			r.tick(p, now)
		}
		clear(batch)
		if ev := r.brk.release(now); ev != nil {
			r.w.submit(&op{events: []queuedEvent{{ev: *ev, state: qPending}}})
		}
		r.forget(now)
		if real := time.Now(); real.Sub(lastPrune) >= pruneEvery {
			lastPrune = real
			if err := r.prune(context.Background(), now); err != nil {
				r.log.Warn("process: prune", "err", err)
			}
		}
	}
}

// snapshot appends the procs that have not ended to dst.
func (r *Registry) snapshot(dst []*proc) []*proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if p.finished.IsZero() {
			dst = append(dst, p)
		}
	}
	return dst
}

func (r *Registry) tick(p *proc, now time.Time) {
	p.mu.Lock()
	if p.info.State != StateRunning {
		p.mu.Unlock()
		return
	}
	r.drainLocked(p, true)
	adopted, pid, ticks := p.info.Adopted, p.info.PID, p.info.StartTicks
	expired := p.info.MaxAge > 0 && p.killWhy == "" && now.Sub(p.info.StartedAt) > p.info.MaxAge
	if expired {
		p.killWhy, p.info.Reason = ReasonMaxAge, ReasonMaxAge // once: later ticks see it
	}
	p.mu.Unlock()

	if adopted {
		if l, err := checkLive(pid, ticks); err == nil && l != alive {
			r.finish(p, adoptedEnd(p.exitPath))
			return
		}
	}
	if expired {
		go func() {
			if _, err := r.terminate(context.Background(), p, KillOptions{Reason: ReasonMaxAge, Notify: true}); err != nil {
				r.log.Warn("process: max-age kill", "id", p.id, "err", err)
			}
		}()
	}
}

// adoptedEnd is the end status of a re-adopted process that is gone: the wrapper's exit file if
// it wrote one, otherwise unknown.
func adoptedEnd(exitPath string) endStatus {
	if code, ok := readExitFile(exitPath); ok {
		return endStatus{state: StateExited, code: code, reason: ReasonExit}
	}
	return endStatus{state: StateExited, reason: ReasonExitUnknown}
}

// forget drops processes that ended more than FinishedTTL ago from memory; they stay readable
// from the checkpoint and the log file.
func (r *Registry) forget(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, p := range r.procs {
		if !p.finished.IsZero() && now.Sub(p.finished) > r.opt.FinishedTTL {
			delete(r.procs, id)
		}
	}
}

// prune deletes processes that ended more than Retention ago, with their final events and their
// files. A process with an event still undelivered is kept until that event is final.
func (r *Registry) prune(ctx context.Context, now time.Time) error {
	cut := now.Add(-r.opt.Retention).UnixMilli()
	ids, err := store.Strings(ctx, r.db, `SELECT id FROM processes WHERE ended_at IS NOT NULL AND ended_at < $1`, cut)
	if err != nil {
		return err
	}
	for _, id := range ids {
		var gone bool
		err := store.Update(ctx, r.db, store.PathProcesses, func(tx *store.Tx) error {
			// Undelivered events of an old process are kept: only final ones go.
			if _, err := tx.ExecContext(ctx, `DELETE FROM process_events WHERE proc_id = $1 AND state IN ($2, $3)`,
				id, qDone, qSuppressed); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM processes WHERE id = $1 AND NOT EXISTS
				(SELECT 1 FROM process_events WHERE proc_id = $2)`, id, id)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if gone = err == nil && n > 0; gone {
				err = tx.Unwithdraw(ctx, Subject(id)) // its notices are long gone too
			}
			return err
		})
		if err != nil {
			return err
		}
		if gone {
			os.Remove(filepath.Join(r.logDir, id+".log"))
			os.Remove(filepath.Join(r.logDir, id+".exit"))
		}
	}
	return nil
}
