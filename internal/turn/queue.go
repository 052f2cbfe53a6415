package turn

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/session"
)

// Queueing: one queue of turns per session key, served by one runner goroutine at a time (run.go),
// so a chat has one turn at a time. Consecutive user messages merge into the one pending turn,
// and notifications of one conversation into one consolidated notification turn.

// queues is the engine's per-key queues. Its mutex is a leaf (see Engine): held only to read or
// change the queues, never across SQL, an agent or plugin call, a channel wait or a context
// cancellation, and nothing is acquired while it is held.
type queues struct {
	mu   sync.Mutex // guards the fields below and every keyQueue in keys
	keys map[string]*keyQueue
	// active counts the runners (runKey goroutines) serving a queue; changed is closed (and
	// replaced) whenever one ends, for Drain to wait on.
	active  int
	changed chan struct{}
	// draining is set by Drain: runners start no further turn.
	draining bool
}

// keyQueue is one chat's turns. Guarded by queues.mu.
type keyQueue struct {
	items   []*item
	active  bool  // a runKey goroutine serves this queue
	running *item // the turn in progress
	cancel  context.CancelCauseFunc
}

// item is one queued turn: user messages (merged while the chat is busy), a queued slash
// command, or a batch of notifications of one conversation. Each entry is one inbox row.
type item struct {
	kind            string // kindMessage or kindNotification
	plugin, profile string
	src             abi.Source // where to answer (the latest message's source)
	cmd, arg        string     // a queued slash command
	entries         []entry    // the turn's inbox rows, in arrival order; never empty while queued
	attempts        int
	// before and after are messages that go with the turn's answer, enqueued in the same
	// transaction as its end (end): a line for each attachment refused (before the answer) and
	// the files it sends (after it).
	before, after []delivery.Message
	// acted is set once the running turn did something running it again could repeat: it
	// started or killed a command, or streamed a draft (see Engine.Drain).
	acted atomic.Bool
}

// entry is one inbox row of an item: a user message, or a notification's process event.
type entry struct {
	id    string // the inbox row
	text  string // the message; for a notification, its record for people
	msgID string // the platform's message id (user messages), for recalls
	// attachments are a user message's files as the platform described them (media.go).
	attachments []abi.Attachment
	// Notifications only:
	stamp  session.Stamp // the process's stamp
	event  string        // the process event, "proc_…#seq"
	notice agent.Notice  // the process event as data
}

// ids returns the inbox ids of it's rows.
func (it *item) ids() []string {
	out := make([]string, len(it.entries))
	for i, en := range it.entries {
		out[i] = en.id
	}
	return out
}

// texts returns the texts of it's rows.
func (it *item) texts() []string {
	out := make([]string, len(it.entries))
	for i, en := range it.entries {
		out[i] = en.text
	}
	return out
}

// notices returns the process events of a notification item's rows.
func (it *item) notices() []agent.Notice {
	out := make([]agent.Notice, len(it.entries))
	for i, en := range it.entries {
		out[i] = en.notice
	}
	return out
}

// first and last are the ids of it's first and last rows (it has at least one).
func (it *item) first() string { return it.entries[0].id }
func (it *item) last() string  { return it.entries[len(it.entries)-1].id }

// keep narrows it to the inbox rows ids.
func (it *item) keep(ids []string) {
	it.entries = slices.DeleteFunc(it.entries, func(en entry) bool { return !slices.Contains(ids, en.id) })
}

// enqueue adds it to key's queue, merging consecutive user messages (one pending slot) and
// notifications of the same conversation (one consolidated turn), and makes sure a runner
// serves the queue.
func (e *Engine) enqueue(key string, it *item) {
	e.queues.mu.Lock()
	defer e.queues.mu.Unlock()
	kq := e.queueLocked(key)
	// An inbox row is in one turn at most: a host that adopts rows it had queued itself (it was
	// taken over while paused, and took them back while the other host was paused in turn)
	// finds them here already. A row twice in one turn would fail the turn's check that it
	// still holds its rows (one row too many), and the turn would stop before it ran.
	it.entries = slices.DeleteFunc(it.entries, func(en entry) bool { return kq.has(en.id) })
	if len(it.entries) == 0 {
		return
	}
	if n := len(kq.items); n > 0 {
		last := kq.items[n-1]
		mergeable := last.kind == it.kind && last.cmd == "" && it.cmd == "" &&
			(it.kind == kindMessage || last.entries[0].stamp.SessionID == it.entries[0].stamp.SessionID)
		if mergeable {
			last.entries = append(last.entries, it.entries...)
			if it.kind == kindMessage {
				last.src = it.src
			}
			return
		}
	}
	kq.items = append(kq.items, it)
	e.serveLocked(key, kq)
}

// has reports whether the inbox row id is in one of kq's turns, queued or running. queues.mu
// must be held.
func (kq *keyQueue) has(id string) bool {
	in := func(it *item) bool {
		return it != nil && slices.ContainsFunc(it.entries, func(en entry) bool { return en.id == id })
	}
	return in(kq.running) || slices.ContainsFunc(kq.items, in)
}

// queueLocked returns key's queue, creating it. queues.mu must be held.
func (e *Engine) queueLocked(key string) *keyQueue {
	kq := e.queues.keys[key]
	if kq == nil {
		kq = &keyQueue{}
		e.queues.keys[key] = kq
	}
	return kq
}

// serveLocked starts kq's runner unless one is active. queues.mu must be held.
func (e *Engine) serveLocked(key string, kq *keyQueue) {
	if kq.active || len(kq.items) == 0 {
		return
	}
	kq.active = true
	e.queues.active++
	e.wg.Add(1)
	go e.runKey(key, kq)
}

// later queues it again after d, behind whatever the chat has queued by then.
func (e *Engine) later(key string, it *item, d time.Duration) {
	time.AfterFunc(d, func() {
		if e.ctx.Err() == nil {
			e.enqueue(key, it)
		}
	})
}

// detach takes the queued turns a /new (all) or /stop (user messages only) cancels off key's
// queue and returns them with the running turn. Nothing is cancelled yet.
func (e *Engine) detach(key string, all bool) (taken []*item, running *item) {
	e.queues.mu.Lock()
	defer e.queues.mu.Unlock()
	kq := e.queues.keys[key]
	if kq == nil {
		return nil, nil
	}
	var keep []*item
	for _, it := range kq.items {
		if !all && it.kind == kindNotification {
			keep = append(keep, it)
			continue
		}
		taken = append(taken, it)
	}
	kq.items = keep
	return taken, kq.running
}

// putBack returns detached turns to the front of key's queue (their command failed).
func (e *Engine) putBack(key string, items []*item) {
	if len(items) == 0 {
		return
	}
	e.queues.mu.Lock()
	defer e.queues.mu.Unlock()
	kq := e.queueLocked(key)
	kq.items = append(append([]*item(nil), items...), kq.items...)
	e.serveLocked(key, kq)
}

// cancelRunning cancels it, if it is still key's running turn, with the command as the cause.
func (e *Engine) cancelRunning(key string, it *item, by string) {
	if it == nil {
		return
	}
	e.queues.mu.Lock()
	var cancel context.CancelCauseFunc
	if kq := e.queues.keys[key]; kq != nil && kq.running == it {
		cancel = kq.cancel
	}
	e.queues.mu.Unlock()
	if cancel != nil {
		cancel(&interrupted{by: by})
	}
}

// forget takes the user message msgID out of key's queued turns (a turn left with no message
// leaves the queue) and returns the inbox ids it took out, with the running turn if that one
// answers the message.
func (e *Engine) forget(key, msgID string) (dropped []string, running *item) {
	e.queues.mu.Lock()
	defer e.queues.mu.Unlock()
	kq := e.queues.keys[key]
	if kq == nil {
		return nil, nil
	}
	if r := kq.running; r != nil && r.kind == kindMessage &&
		slices.ContainsFunc(r.entries, func(en entry) bool { return en.msgID == msgID }) {
		running = r
	}
	for _, it := range kq.items {
		if it.kind != kindMessage {
			continue
		}
		it.entries = slices.DeleteFunc(it.entries, func(en entry) bool {
			if en.msgID != msgID {
				return false
			}
			dropped = append(dropped, en.id)
			return true
		})
	}
	kq.items = slices.DeleteFunc(kq.items, func(it *item) bool { return len(it.entries) == 0 })
	return dropped, running
}

// queueState describes key's queue for /status: whether a turn runs (and whether it is a
// notification turn) and how many wait.
func (e *Engine) queueState(key string) (known, running, notification bool, queued int) {
	e.queues.mu.Lock()
	defer e.queues.mu.Unlock()
	kq := e.queues.keys[key]
	if kq == nil {
		return false, false, false, 0
	}
	if kq.running != nil {
		running, notification = true, kq.running.kind == kindNotification
	}
	return true, running, notification, len(kq.items)
}
