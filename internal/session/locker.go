package session

import (
	"context"
	"sync"
	"sync/atomic"
)

// Locker provides the boundary lock: mutual exclusion per session key. Open picks one from the
// database: the in-process LocalLocker on SQLite (one host owns the file), PostgresLocker on
// PostgreSQL (several hosts may share the database; Open then also turns the route cache off,
// since another host's transitions would make it stale, and refuses a LocalLocker). A caller
// supplying another distributed Locker must disable the cache itself (Options.CacheSize < 0).
//
// A distributed lock can be lost while held (PostgresLocker: its connection fails). The kernel's
// writes stay consistent without it (compare-and-set on the route in serializable
// transactions), but a check-then-send is exclusive only while the lock holds: see
// PostgresLocker and Boundary.Verify.
type Locker interface {
	// Lock blocks until the caller holds key's lock or ctx is done. The returned unlock must be
	// called exactly once.
	Lock(ctx context.Context, key string) (unlock func(), err error)
}

// LocalLocker is an in-process Locker. It keeps an entry only for keys that are locked or
// waited on: entries are reference counted and removed when the last holder or waiter leaves,
// so memory does not grow with the number of keys ever seen.
type LocalLocker struct {
	mu sync.Mutex
	m  map[string]*lockEntry
}

type lockEntry struct {
	ch   chan struct{} // capacity 1: holding the lock = having sent into it
	refs int           // holders + waiters; guarded by LocalLocker.mu
}

// NewLocalLocker returns an empty in-process Locker.
func NewLocalLocker() *LocalLocker { return &LocalLocker{m: make(map[string]*lockEntry)} }

// Lock implements Locker.
func (l *LocalLocker) Lock(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	e := l.m[key]
	if e == nil {
		e = &lockEntry{ch: make(chan struct{}, 1)}
		l.m[key] = e
	}
	e.refs++
	l.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
	default:
		select {
		case e.ch <- struct{}{}:
		case <-ctx.Done():
			l.release(key, e)
			return nil, ctx.Err()
		}
	}
	var done atomic.Bool
	return func() {
		if !done.CompareAndSwap(false, true) {
			panic("session: boundary lock released twice")
		}
		<-e.ch
		l.release(key, e)
	}, nil
}

func (l *LocalLocker) release(key string, e *lockEntry) {
	l.mu.Lock()
	e.refs--
	if e.refs == 0 {
		delete(l.m, key)
	}
	l.mu.Unlock()
}

// Len returns the number of keys currently locked or waited on.
func (l *LocalLocker) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// waiters returns how many goroutines hold or wait for key's lock (tests use it to know a
// goroutine is parked on the lock).
func (l *LocalLocker) waiters(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[key]; e != nil {
		return e.refs
	}
	return 0
}
