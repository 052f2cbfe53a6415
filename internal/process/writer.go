package process

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// queuedEvent is an event to insert and the queue state it starts in.
type queuedEvent struct {
	ev    Event
	state string // qPending or qSuppressed

	// tailFrom is set when ev.Output lacks output because the log file could not be read: the
	// writer reads the tail (tailChars characters) from this log file again before each attempt
	// to commit, and keeps it once a read succeeds.
	tailFrom  string
	tailChars int
}

// refreshTail reads qe's output tail from its log file if it lacked output; see tailFrom.
func (qe *queuedEvent) refreshTail() {
	if qe.tailFrom == "" {
		return
	}
	tail, cut, _, err := fileTail(qe.tailFrom, qe.tailChars)
	if err != nil {
		return // the event keeps its marked tail; tried again at the next attempt
	}
	qe.ev.Output, qe.ev.OutputCut, qe.tailFrom = tail, cut, ""
}

// op is one unit of durable work: an optional checkpoint row, events that go with it, and an
// optional suppression of the process's completion. Events are inserted only when the row (if
// any) was applied, so a stale snapshot never produces events either.
type op struct {
	row      *Info
	events   []queuedEvent
	suppress string // process id whose undelivered completion is suppressed
	// from is the host the stored row must name for row to apply (upsertRow): the writer's own
	// host, or, for a takeover at Recover, the host the row was read with.
	from string
	// truth marks a row this host observed itself (a process it runs, or found ended in its data
	// directory): if another host recorded it as lost by a takeover meanwhile, it is written
	// anyway (reconcileRow). A write of a row only read from the database (consumeStored) is not.
	truth bool
	// takeover marks a row that takes the process over from another host (Recover): a lost
	// notice still queued is withdrawn when the row says the process runs.
	takeover bool

	done      chan struct{}
	err       error
	applied   bool   // the row's compare-and-set succeeded
	reclaimed bool   // applied over another host's lost record (reconcileRow)
	other     string // not applied: the row names this other host
}

// mustLand reports whether o carries events (a completion, a watch match): such an op is
// retried until the store takes it, because nothing else would ever produce its events again
// while this host runs. Other ops fail back to their caller, who can act on the error.
func (o *op) mustLand() bool { return len(o.events) > 0 }

// wait blocks until the op is committed (or failed) and returns its error.
func (o *op) wait() error {
	<-o.done
	return o.err
}

// ErrStoreFailing wraps the store error that makes the writer retry: while it retries the ops
// that must land, other ops fail at once with it.
var ErrStoreFailing = errors.New("process: the store is failing; checkpoints are being retried")

// writer is the single goroutine that writes checkpoints and events. Callers append ops under
// their own process's mutex, so the ops of one process reach SQLite in the order its state
// changed; the writer commits whatever has queued up in one transaction (group commit), which
// keeps the latency of one write low while a thousand processes change state.
//
// When the store fails, an op that must land (it carries events: the end of a process and its
// completion) is retried with backoff until the store takes it, and everything queued after it
// waits, so one process's writes still land in order. Meanwhile other ops fail at once with
// ErrStoreFailing, and Health reports the failure.
type writer struct {
	db   *sql.DB
	now  func() time.Time
	log  *slog.Logger
	wake func() // called after a commit that queued deliverable events

	stmts stmtCache // used by the writer goroutine only

	mu      sync.Mutex // guards queue, closed, failing and since
	queue   []*op
	closed  bool
	failing error         // the store error the writer is retrying after; nil when healthy
	since   time.Time     // when failing began
	kick    chan struct{} // capacity 1: "the queue is not empty"
	quit    chan struct{} // closed by close
	stopped chan struct{}

	retryMin, retryMax time.Duration
}

const maxBatch = 512

func newWriter(db *sql.DB, now func() time.Time, log *slog.Logger, wake func(), retryMin, retryMax time.Duration) *writer {
	w := &writer{db: db, now: now, log: log, wake: wake, kick: make(chan struct{}, 1), quit: make(chan struct{}),
		stopped: make(chan struct{}), stmts: stmtCache{db: db}, retryMin: retryMin, retryMax: retryMax}
	go w.run()
	return w
}

// submit queues o. It never blocks, so it may be called with a process mutex held.
func (w *writer) submit(o *op) *op {
	o.done = make(chan struct{})
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		o.err = ErrClosed
		close(o.done)
		return o
	case w.failing != nil && !o.mustLand():
		err := w.failing
		w.mu.Unlock()
		o.err = fmt.Errorf("%w: %w", ErrStoreFailing, err)
		close(o.done)
		return o
	}
	w.queue = append(w.queue, o)
	select {
	case w.kick <- struct{}{}:
	default:
	}
	w.mu.Unlock()
	return o
}

// health reports the store error the writer is retrying after (nil when healthy), since when,
// and how many ops wait for it.
func (w *writer) health() (error, time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failing, w.since, len(w.queue)
}

// close stops accepting ops, commits what is queued (one more attempt while the store fails)
// and waits for the goroutine to end.
func (w *writer) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.quit)
	}
	w.mu.Unlock()
	<-w.stopped
}

func (w *writer) run() {
	defer close(w.stopped)
	defer w.stmts.close()
	backoff := w.retryMin
	for {
		w.mu.Lock()
		n := min(len(w.queue), maxBatch)
		batch := w.queue[:n:n]
		w.queue = w.queue[n:]
		if len(w.queue) == 0 {
			w.queue = nil
		}
		closed := w.closed
		w.mu.Unlock()
		if n == 0 {
			if closed {
				return
			}
			select {
			case <-w.kick:
			case <-w.quit:
			}
			continue
		}
		rest, err := w.commit(batch)
		if len(rest) == 0 {
			w.healthy()
			backoff = w.retryMin
			continue
		}
		// An op that must land failed: it and everything after it wait, in order.
		w.mu.Lock()
		w.queue = append(rest, w.queue...)
		if w.failing == nil {
			w.since = w.now()
			w.log.Error("process: checkpoint of a process's end failed; retrying until the store takes it",
				"waiting", len(w.queue), "err", err)
		}
		w.failing = err
		var shed []*op // ops that need not land fail now, instead of waiting for the store
		keep := w.queue[:0]
		for _, o := range w.queue {
			if o.mustLand() {
				keep = append(keep, o)
			} else {
				shed = append(shed, o)
			}
		}
		w.queue = keep
		w.mu.Unlock()
		for _, o := range shed {
			o.err, o.applied = fmt.Errorf("%w: %w", ErrStoreFailing, err), false
			close(o.done)
		}
		if closed {
			w.abandon(err)
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-w.quit: // one more attempt, then give up
		}
		t.Stop()
		backoff = min(backoff*2, w.retryMax)
	}
}

// healthy records that a commit went through.
func (w *writer) healthy() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failing != nil {
		w.log.Info("process: the store takes checkpoints again", "failed_for", w.now().Sub(w.since).Round(time.Millisecond))
		w.failing = nil
	}
}

// abandon fails every queued op at close while the store still fails: the next host's Recover
// sees those processes as still running and records their ends.
func (w *writer) abandon(err error) {
	w.mu.Lock()
	q := w.queue
	w.queue = nil
	w.mu.Unlock()
	for _, o := range q {
		o.err, o.applied = fmt.Errorf("%w (store: %v)", ErrClosed, err), false
		close(o.done)
	}
}

// commit writes batch in one transaction. If that fails, each op is tried alone, in order, so
// one bad op cannot fail the others: an op that need not land gets its own error; at the first
// op that must land and fails, commit stops and returns it with the ops after it (not yet
// tried), for the caller to retry.
func (w *writer) commit(batch []*op) ([]*op, error) {
	err := w.commitTx(batch)
	if err == nil {
		w.settle(batch, nil)
		return nil, nil
	}
	if len(batch) == 1 {
		if batch[0].mustLand() {
			return batch, err
		}
		w.log.Error("process: checkpoint write failed", "err", err)
		w.settle(batch, err)
		return nil, nil
	}
	for i, o := range batch {
		if rest, err := w.commit([]*op{o}); len(rest) > 0 {
			return batch[i:], err
		}
	}
	return nil, nil
}

func (w *writer) commitTx(batch []*op) error {
	ctx := context.Background()
	for _, o := range batch { // file reads, outside the transaction
		for i := range o.events {
			o.events[i].refreshTail()
		}
	}
	now := w.now()
	notify := false
	err := store.WithTx(ctx, w.db, func(sqlTx *sql.Tx) error {
		notify = false
		tx := &stmtTx{tx: sqlTx, cache: &w.stmts, stmts: map[string]*sql.Stmt{}}
		for _, o := range batch {
			n, err := o.apply(ctx, tx, now)
			if err != nil {
				return err
			}
			notify = notify || n
		}
		return nil
	})
	store.Report(w.db, store.PathProcesses, err)
	if err == nil && notify && w.wake != nil {
		w.wake()
	}
	return err
}

// settle completes the ops of batch with err.
func (w *writer) settle(batch []*op, err error) {
	for _, o := range batch {
		o.err = err
		if err != nil {
			o.applied = false
		} else if o.other != "" {
			o.err = fmt.Errorf("%w: %s is recorded by host %s", ErrTakenOver, o.row.ID, o.other)
			kinds := make([]EventKind, len(o.events))
			for i, qe := range o.events {
				kinds[i] = qe.ev.Kind
			}
			w.log.Error("process: checkpoint not written: another host recorded the process meanwhile",
				"id", o.row.ID, "host", o.other, "state", o.row.State, "events_not_queued", kinds)
		}
		close(o.done)
	}
}

// apply runs o inside tx. It reports whether it queued a deliverable event.
func (o *op) apply(ctx context.Context, tx *stmtTx, now time.Time) (deliverable bool, err error) {
	o.applied, o.reclaimed, o.other = true, false, ""
	if o.row != nil {
		if o.applied, err = writeRow(ctx, tx, o.row, o.from, now); err != nil {
			return false, err
		}
		if !o.applied && o.truth {
			if o.reclaimed, o.other, err = reconcileRow(ctx, tx, o.row, o.from, now); err != nil {
				return false, err
			}
			o.applied = o.reclaimed
		}
		if o.applied && (o.reclaimed || o.takeover) && !o.row.State.Final() {
			if err := withdrawLost(ctx, tx, o.row.ID, now); err != nil {
				return false, err
			}
		}
	}
	if o.applied {
		for i := range o.events {
			qe := &o.events[i]
			ins, err := insertEvent(ctx, tx, &qe.ev, qe.state, now)
			if err != nil {
				return false, err
			}
			if !ins && qe.ev.Kind == EventCompletion {
				// The process has a completion already: a lost notice of a takeover, which
				// this real end replaces or corrects, or (any other) a repeat, ignored.
				if ins, err = supersedeLost(ctx, tx, &qe.ev, qe.state, now); err != nil {
					return false, err
				}
			}
			deliverable = deliverable || (ins && qe.state == qPending)
		}
	}
	if o.suppress != "" {
		if err := suppressCompletion(ctx, tx, o.suppress, now); err != nil {
			return false, err
		}
	}
	return deliverable, nil
}
