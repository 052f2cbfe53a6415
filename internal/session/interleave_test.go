package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// These tests force each interleaving deterministically: a goroutine holds the boundary at a
// chosen point (channels), the competitor is observed parked on that key's lock (LocalLocker's
// waiter count), then the first one is released.

func (e *env) parked(key string, n int) {
	e.t.Helper()
	l := e.localLock()
	waitFor(e.t, "goroutines parked on the boundary lock", func() bool { return l.waiters(key) == n })
}

// localLock returns the kernel's in-process lock (the PostgreSQL lock queues a host's waiters on
// one).
func (e *env) localLock() *LocalLocker {
	switch l := e.k.locker.(type) {
	case *LocalLocker:
		return l
	case *PostgresLocker:
		return l.local
	}
	e.t.Fatalf("no local lock in %T", e.k.locker)
	return nil
}

// holdThen runs fn inside key's boundary in a goroutine: it signals once inside, waits for
// release, then runs fn. The returned channel yields fn's error.
func (e *env) holdThen(key string, fn func(b *Boundary) error) (release func(), done <-chan error) {
	inside, rel, out := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		out <- e.k.WithBoundary(e.ctx, key, func(b *Boundary) error {
			close(inside)
			<-rel
			return fn(b)
		})
	}()
	<-inside
	return func() { close(rel) }, out
}

func async[T any](fn func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	return ch
}

func TestInterleaveDeliveryFirstThenReset(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	s := e.stamp(dm("i1"))
	var v Verdict
	release, delivered := e.holdThen(s.Key, func(b *Boundary) error {
		v = b.Classify(s)
		if !v.Deliverable() {
			return nil
		}
		_, err := b.Append(v.SessionID, Message{Role: "notification", Text: "done"})
		return err
	})
	reset := async(func() Route { return e.r(e.k.Reset(e.ctx, s.Key, "")) })
	e.parked(s.Key, 2)
	select {
	case <-reset:
		t.Fatal("/new overtook a held boundary")
	default:
	}
	release()
	if err := <-delivered; err != nil {
		t.Fatal(err)
	}
	r := <-reset
	if v.Kind != Deliver || v.SessionID != s.SessionID {
		t.Fatalf("verdict %v", v)
	}
	if len(e.transcript(s.SessionID)) != 1 || len(e.transcript(r.SessionID)) != 0 {
		t.Fatal("the notification is not in the stamped session only")
	}
}

func TestInterleaveResetFirstThenDelivery(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	s := e.stamp(dm("i2"))
	var r Route
	release, resetDone := e.holdThen(s.Key, func(b *Boundary) error {
		var err error
		r, err = b.Reset("")
		return err
	})
	v := async(func() Verdict { return e.deliver(s, "done") })
	e.parked(s.Key, 2)
	release()
	if err := <-resetDone; err != nil {
		t.Fatal(err)
	}
	if got := <-v; got.Kind != Stale {
		t.Fatalf("verdict %v", got)
	}
	if len(e.transcript(r.SessionID)) != 0 || len(e.transcript(s.SessionID)) != 0 {
		t.Fatal("a stale notification was appended")
	}
}

// /new lands between the pre-flight classification and the send: the in-boundary re-check
// drops it.
func TestInterleaveNewBetweenClassificationAndSend(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	s := e.stamp(dm("i3"))
	if pre := e.k.Classify(e.ctx, s); pre.Kind != Deliver {
		t.Fatalf("pre-flight %v", pre)
	}
	r := e.r(e.k.Reset(e.ctx, s.Key, "")) // the user types /new now
	sent := false
	err := e.k.WithBoundary(e.ctx, s.Key, func(b *Boundary) error {
		if v := b.Classify(s); v.Deliverable() {
			sent = true
			_, err := b.Append(v.SessionID, Message{Text: "done"})
			return err
		}
		return nil
	})
	if err != nil || sent || len(e.transcript(r.SessionID)) != 0 {
		t.Fatalf("sent=%v err=%v", sent, err)
	}
	// And the other way round: /new arrives while the check-and-send holds the boundary; it
	// waits for the send, so the message lands in the session the user was still in.
	s2 := e.stamp(dm("i3"))
	var v Verdict
	release, done := e.holdThen(s2.Key, func(b *Boundary) error {
		v = b.Classify(s2)
		_, err := b.Append(v.SessionID, Message{Text: "done"})
		return err
	})
	newDone := async(func() Route { return e.r(e.k.Reset(e.ctx, s2.Key, "")) })
	e.parked(s2.Key, 2)
	release()
	<-done
	r2 := <-newDone
	if v.SessionID != s2.SessionID || len(e.transcript(r2.SessionID)) != 0 {
		t.Fatalf("verdict %v", v)
	}
}

// An auto-reset lookup (a user message after the idle limit) races a delivery.
func TestInterleaveAutoResetVsDelivery(t *testing.T) {
	opt := Options{AutoReset: ResetPolicy{Mode: ResetIdle, IdleAfter: time.Hour}}
	t.Run("lookup first", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			e := newEnv(t, opt)
			e.t = t
			src := dm("i4")
			s := e.stamp(src)
			time.Sleep(2 * time.Hour)
			var res Resolution
			release, done := e.holdThen(s.Key, func(b *Boundary) error {
				var err error
				res, err = b.Resolve(src, ResolveOptions{})
				return err
			})
			v := async(func() Verdict { return e.deliver(s, "done") })
			e.parked(s.Key, 2)
			release()
			<-done
			got := <-v
			if res.Reason != EndIdle || got.Kind != DeliverCurrent || got.SessionID != res.SessionID {
				t.Fatalf("reset %+v, verdict %v", res, got)
			}
			if len(e.transcript(s.SessionID)) != 0 {
				t.Fatal("delivered into the idle-ended session")
			}
		})
	})
	t.Run("delivery first", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			e := newEnv(t, opt)
			e.t = t
			src := dm("i4")
			s := e.stamp(src)
			time.Sleep(2 * time.Hour)
			var v Verdict
			release, done := e.holdThen(s.Key, func(b *Boundary) error {
				v = b.Classify(s)
				_, err := b.Append(v.SessionID, Message{Text: "done"})
				return err
			})
			res := async(func() Resolution { return e.resolve(src) })
			e.parked(s.Key, 2)
			release()
			<-done
			r := <-res
			if v.Kind != Deliver || v.SessionID != s.SessionID || r.Reason != EndIdle {
				t.Fatalf("verdict %v, reset %+v", v, r)
			}
			if len(e.transcript(r.SessionID)) != 0 || len(e.transcript(s.SessionID)) != 1 {
				t.Fatal("message not in the session that was current at the send")
			}
		})
	})
}

// Compression races a delivery: the delivery lands in the stamped session or its
// continuation, or is retried; never in a reset session.
func TestInterleaveCompressionVsDelivery(t *testing.T) {
	t.Run("compression first", func(t *testing.T) {
		e := newEnv(t, Options{})
		e.t = t
		s := e.stamp(dm("i5"))
		var r Route
		release, done := e.holdThen(s.Key, func(b *Boundary) error {
			var err error
			r, err = b.Compress(s.SessionID, "sum")
			return err
		})
		v := async(func() Verdict { return e.deliver(s, "done") })
		e.parked(s.Key, 2)
		release()
		<-done
		if got := <-v; got.Kind != DeliverContinuation || got.SessionID != r.SessionID {
			t.Fatalf("verdict %v", got)
		}
	})
	t.Run("delivery first", func(t *testing.T) {
		e := newEnv(t, Options{})
		e.t = t
		s := e.stamp(dm("i5"))
		var v Verdict
		release, done := e.holdThen(s.Key, func(b *Boundary) error {
			v = b.Classify(s)
			_, err := b.Append(v.SessionID, Message{Text: "done"})
			return err
		})
		c := async(func() error { _, err := e.k.Compress(e.ctx, s.Key, s.SessionID, ""); return err })
		e.parked(s.Key, 2)
		release()
		<-done
		if err := <-c; err != nil || v.Kind != Deliver || len(e.transcript(s.SessionID)) != 1 {
			t.Fatalf("verdict %v, compress %v", v, err)
		}
	})
	t.Run("compression then /new before the delivery", func(t *testing.T) {
		e := newEnv(t, Options{})
		e.t = t
		s := e.stamp(dm("i5"))
		release, done := e.holdThen(s.Key, func(b *Boundary) error {
			if _, err := b.Compress(s.SessionID, ""); err != nil {
				return err
			}
			_, err := b.Reset("") // the continuation is left at a user boundary
			return err
		})
		v := async(func() Verdict { return e.deliver(s, "done") })
		e.parked(s.Key, 2)
		release()
		<-done
		got := <-v
		if got.Deliverable() {
			t.Fatalf("verdict %v", got)
		}
		var n int
		e.db.QueryRow(`SELECT COUNT(*) FROM session_messages`).Scan(&n)
		if n != 0 {
			t.Fatalf("%d messages appended", n)
		}
	})
}

// Concurrent first messages for one key create exactly one session, with and without the
// single-flight of Kernel.Resolve (the lock alone suffices).
func TestInterleaveConcurrentGetOrCreate(t *testing.T) {
	for _, viaKernel := range []bool{true, false} {
		e := newEnv(t, Options{})
		e.t = t
		src := dm("i6")
		const n = 16
		start := make(chan struct{})
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var r Resolution
				var err error
				if viaKernel {
					r, err = e.k.Resolve(e.ctx, src, ResolveOptions{})
				} else {
					err = e.k.WithBoundary(e.ctx, e.key(src), func(b *Boundary) error {
						r, err = b.Resolve(src, ResolveOptions{})
						return err
					})
				}
				if err != nil {
					t.Error(err)
				}
				ids[i] = r.SessionID
			}()
		}
		close(start)
		wg.Wait()
		var rows int
		e.db.QueryRow(`SELECT COUNT(*) FROM sessions`).Scan(&rows)
		if rows != 1 {
			t.Fatalf("viaKernel=%v: %d sessions", viaKernel, rows)
		}
		for _, id := range ids {
			if id != ids[0] {
				t.Fatalf("callers got %s and %s", id, ids[0])
			}
		}
		if l := e.localLock().Len(); l != 0 {
			t.Fatalf("%d lock entries left", l)
		}
	}
}

func TestBoundaryDiscipline(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	src := dm("bd")
	key := e.key(src)
	e.resolve(src)
	var leaked *Boundary
	err := e.k.WithBoundary(e.ctx, key, func(b *Boundary) error {
		leaked = b
		if err := e.k.WithBoundary(b.Context(), key, func(*Boundary) error { return nil }); !errors.Is(err, ErrNestedBoundary) {
			t.Errorf("nested same key: %v", err)
		}
		if err := e.k.WithBoundary(b.Context(), "agent:main:telegram:dm:other", func(*Boundary) error { return nil }); !errors.Is(err, ErrNestedBoundary) {
			t.Errorf("nested other key: %v", err)
		}
		if _, err := e.k.Reset(b.Context(), key, ""); !errors.Is(err, ErrNestedBoundary) {
			t.Errorf("kernel transition inside: %v", err)
		}
		if _, err := e.k.Resolve(b.Context(), src, ResolveOptions{}); !errors.Is(err, ErrNestedBoundary) {
			t.Errorf("kernel resolve inside: %v", err)
		}
		// The handle's own methods work under the held lock.
		_, err := b.Reset("")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaked.Reset(""); !errors.Is(err, ErrBoundaryClosed) {
		t.Fatalf("leaked handle: %v", err)
	}
	if v := leaked.Classify(Stamp{Key: key}); v.Deliverable() {
		t.Fatalf("leaked handle classified %v", v)
	}
	// A waiter whose context ends gives up and leaves no lock entry behind.
	release, done := e.holdThen(key, func(*Boundary) error { return nil })
	ctx, cancel := context.WithCancel(e.ctx)
	waiter := async(func() error { return e.k.WithBoundary(ctx, key, func(*Boundary) error { return nil }) })
	e.parked(key, 2)
	cancel()
	if err := <-waiter; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	release()
	<-done
	if l := e.localLock().Len(); l != 0 {
		t.Fatalf("%d lock entries left", l)
	}
}
