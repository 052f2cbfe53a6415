package turn

import (
	"context"
	"errors"

	"github.com/hermes-host/hermes-host/internal/store"
)

// Draining: a host that is asked to stop (SIGTERM) lets the turns in progress finish and hands
// back the ones that cannot finish in time, so that after a restart (or on another host sharing
// the database) each is answered once, without the "I was restarted" notice a crash leaves.

// errDraining is the cause a turn is cancelled with when the host's drain ran out of time.
var errDraining = errors.New("the host is stopping")

// Handed-back rows are queued again with this outcome until their turn ends.
const handedBack = "handed back: the host stopped before this turn finished; it runs again at the next start"

// Drain stops the engine taking up new work and waits for the turns in progress. From the
// call on, no queued turn starts (queued rows stay queued: the next start runs them) and no
// process event is claimed (the queue keeps them). When every running turn has ended, Drain
// returns true. When ctx ends first, it cancels the turns still running and hands them back:
// a user's message whose turn has done nothing the chat or the machine could see (no command
// started or killed, no draft streamed) goes back to queued, as does a notification turn
// (read-only); the next start (or another host adopting this one's rows) runs them as if they
// had never started. A turn that did act, or a slash command, keeps its rows running, and the
// next start records it interrupted and tells the user, as after a crash: running it again
// could repeat what it did. Drain then waits for those turns to return, and returns false.
//
// Inbound events are still recorded and applied meanwhile (the caller stops intake first);
// they are queued for the next start. Cancel Start's context after Drain to stop the rest.
func (e *Engine) Drain(ctx context.Context) bool {
	e.queues.mu.Lock()
	if !e.queues.draining {
		e.queues.draining = true
		close(e.drain)
	}
	e.queues.mu.Unlock()
	if e.waitRunners(ctx) {
		return true
	}
	e.queues.mu.Lock()
	var cancels []context.CancelCauseFunc
	for _, kq := range e.queues.keys {
		if kq.running != nil && kq.cancel != nil {
			cancels = append(cancels, kq.cancel)
		}
	}
	e.queues.mu.Unlock()
	for _, cancel := range cancels {
		cancel(errDraining)
	}
	e.waitRunners(context.Background()) // each returns promptly once cancelled (a model call, a command, a send wait)
	return false
}

// waitRunners waits until no chat's runner is active, or ctx ends; it reports which.
func (e *Engine) waitRunners(ctx context.Context) bool {
	for {
		e.queues.mu.Lock()
		n, changed := e.queues.active, e.queues.changed
		e.queues.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// handBack queues it's rows again after its turn was cancelled by a drain that ran out of time
// (see Drain), unless running it again could repeat what it did. The move is a compare-and-set
// on running: a turn that recorded its outcome before it saw the cancellation keeps it.
func (e *Engine) handBack(key string, it *item) {
	if it.cmd != "" || it.acted.Load() {
		return // recorded interrupted at the next start (recover), and the user told
	}
	err := e.write(func(ctx context.Context, t *store.Tx) error {
		_, err := e.settle(ctx, t, key, it, stQueued, handedBack, stRunning)
		return err
	})
	if err != nil {
		// The rows stay running: the next start records them interrupted.
		e.log.Error("turn: handing back a turn the stop interrupted failed", "key", key, "ids", it.ids(), "error", err)
	}
}
