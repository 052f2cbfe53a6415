package process

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// queuedEvent is an event to insert and the queue state it starts in.
type queuedEvent struct {
	ev    Event
	state string // qPending or qSuppressed
}

// op is one unit of durable work: an optional checkpoint row, events that go with it, and an
// optional suppression of the process's completion. Events are inserted only when the row (if
// any) was applied, so a stale snapshot never produces events either.
type op struct {
	row      *Info
	events   []queuedEvent
	suppress string // process id whose undelivered completion is suppressed

	done    chan struct{}
	err     error
	applied bool // the row's compare-and-set succeeded
}

// wait blocks until the op is committed (or failed) and returns its error.
func (o *op) wait() error {
	<-o.done
	return o.err
}

// writer is the single goroutine that writes checkpoints and events. Callers append ops under
// their own process's mutex, so the ops of one process reach SQLite in the order its state
// changed; the writer commits whatever has queued up in one transaction (group commit), which
// keeps the latency of one write low while a thousand processes change state.
type writer struct {
	db   *sql.DB
	now  func() time.Time
	log  *slog.Logger
	wake func() // called after a commit that queued deliverable events

	stmts stmtCache // used by the writer goroutine only

	mu      sync.Mutex // guards queue, closed and sending on or closing kick
	queue   []*op
	closed  bool
	kick    chan struct{} // capacity 1: "the queue is not empty"
	stopped chan struct{}
}

const maxBatch = 512

func newWriter(db *sql.DB, now func() time.Time, log *slog.Logger, wake func()) *writer {
	w := &writer{db: db, now: now, log: log, wake: wake, kick: make(chan struct{}, 1), stopped: make(chan struct{}),
		stmts: stmtCache{db: db}}
	go w.run()
	return w
}

// submit queues o. It never blocks, so it may be called with a process mutex held.
func (w *writer) submit(o *op) *op {
	o.done = make(chan struct{})
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		o.err = ErrClosed
		close(o.done)
		return o
	}
	w.queue = append(w.queue, o)
	select { // under mu: close cannot close kick in between
	case w.kick <- struct{}{}:
	default:
	}
	w.mu.Unlock()
	return o
}

// close stops accepting ops, commits what is queued and waits for the goroutine to end.
func (w *writer) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.kick) // run drains what is queued, then returns
	}
	w.mu.Unlock()
	<-w.stopped
}

func (w *writer) run() {
	defer close(w.stopped)
	defer w.stmts.close()
	for range w.kick {
		for {
			w.mu.Lock()
			n := len(w.queue)
			if n > maxBatch {
				n = maxBatch
			}
			batch := w.queue[:n:n]
			w.queue = w.queue[n:]
			if len(w.queue) == 0 {
				w.queue = nil
			}
			w.mu.Unlock()
			if n == 0 {
				break
			}
			w.commit(batch)
		}
	}
}

// commit writes batch in one transaction. If that fails, each op is retried alone so one bad op
// cannot fail the others, and each op gets its own error.
func (w *writer) commit(batch []*op) {
	ctx := context.Background()
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
	if err != nil && len(batch) > 1 {
		for _, o := range batch {
			w.commit([]*op{o})
		}
		return
	}
	for _, o := range batch {
		o.err = err
		if err != nil {
			o.applied = false
			w.log.Error("process: checkpoint write failed", "err", err)
		}
		close(o.done)
	}
	if err == nil && notify && w.wake != nil {
		w.wake()
	}
}

// apply runs o inside tx. It reports whether it queued a deliverable event.
func (o *op) apply(ctx context.Context, tx *stmtTx, now time.Time) (deliverable bool, err error) {
	o.applied = true
	if o.row != nil {
		if o.applied, err = writeRow(ctx, tx, o.row, now); err != nil {
			return false, err
		}
	}
	if o.applied {
		for i := range o.events {
			qe := &o.events[i]
			ins, err := insertEvent(ctx, tx, &qe.ev, qe.state, now)
			if err != nil {
				return false, err
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
