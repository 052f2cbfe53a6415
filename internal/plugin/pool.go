package plugin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	extism "github.com/extism/go-sdk"
)

// instance is one live copy of a plugin. It is owned by exactly one goroutine at a time: the
// pool hands it out and takes it back, and nothing else holds a reference.
type instance struct {
	p      *extism.Plugin
	stderr *headBuffer // the guest's stderr, for crash reports (a Go panic prints there)
	// dead is set by wazero when any module of the instance closes: the guest called
	// proc_exit (even with status 0), a deadline stopped it, or the host closed it. A dead
	// instance never runs code again; exitCode is the status it closed with.
	dead     atomic.Bool
	exitCode atomic.Uint32
}

// CloseNotify implements wazero's experimental.CloseNotifier for the instance's modules.
func (i *instance) CloseNotify(_ context.Context, exitCode uint32) {
	i.exitCode.Store(exitCode)
	i.dead.Store(true)
}

func (i *instance) close() { i.p.Close(context.Background()) }

// pool is a bounded set of instances of one plugin version. slots holds one token per instance
// that exists (idle or busy), so at most cap(slots) exist; idle holds the ones not in use.
type pool struct {
	create func(context.Context) (*instance, error)
	slots  chan struct{}
	idle   chan *instance

	mu     sync.Mutex
	closed bool
}

var errPoolClosed = errors.New("plugin version unloaded")

func newPool(size int, create func(context.Context) (*instance, error)) *pool {
	return &pool{create: create, slots: make(chan struct{}, size), idle: make(chan *instance, size)}
}

// get returns an idle instance, or creates one if fewer than the maximum exist, or waits.
func (p *pool) get(ctx context.Context) (*instance, error) {
	select {
	case inst := <-p.idle:
		return inst, nil
	default:
	}
	select {
	case inst := <-p.idle:
		return inst, nil
	case p.slots <- struct{}{}:
		inst, err := p.create(ctx)
		if err != nil {
			<-p.slots
			return nil, err
		}
		return inst, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// put returns a healthy instance. After close, the instance is closed instead.
func (p *pool) put(inst *instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		inst.close()
		<-p.slots
		return
	}
	p.idle <- inst // never blocks: at most cap(slots) instances exist
}

// discard closes an instance that must not be reused (it trapped, timed out, or a host function
// panicked under it) and frees its slot.
func (p *pool) discard(inst *instance) {
	inst.close()
	<-p.slots
}

// size reports how many instances exist.
func (p *pool) size() int { return len(p.slots) }

// close closes the idle instances now and busy ones as they come back.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for {
		select {
		case inst := <-p.idle:
			inst.close()
			<-p.slots
		default:
			return
		}
	}
}

// headBuffer keeps the first max bytes written to it since the last take: a Go guest prints
// the reason for a crash ("panic: …", "fatal error: out of memory") before its stack traces.
type headBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (h *headBuffer) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.buf); room > 0 {
		h.buf = append(h.buf, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

// take returns what was written since the last take, up to the end of the first goroutine's
// stack trace, and resets the buffer.
func (h *headBuffer) take() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := string(h.buf)
	h.buf = h.buf[:0]
	if i := strings.Index(s, "\n\ngoroutine "); i >= 0 {
		if j := strings.Index(s[i+2:], "\n\n"); j >= 0 {
			s = s[:i+2+j]
		}
	}
	return s
}
