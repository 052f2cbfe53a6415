package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Hold runs fn while holding lease name, and returns when fn does. If another holder has the
// lease, or this Manager holds it already (a Hold of the same name in progress), it returns
// ErrHeld at once without running fn.
//
// While fn runs, the lease is renewed every ttl/3. When a renewal fails (the database cannot be
// reached within ttl/3) or finds the lease taken over, fn's ctx is cancelled (its cause wraps
// ErrLost) and Hold, once fn has returned, returns that error. fn must return promptly when its
// ctx is cancelled: another instance may take the lease over as soon as it expires, at the
// latest ttl/3 after the cancellation (less the clock skew between the instances).
//
// When fn returns by itself Hold releases the lease, so a standby may take it at once, and
// returns nil. A release that fails is not reported: the lease then expires within ttl.
func (m *Manager) Hold(ctx context.Context, name string, fn func(ctx context.Context)) error {
	m.mu.Lock()
	if m.held[name] {
		m.mu.Unlock()
		return ErrHeld
	}
	m.held[name] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.held, name)
		m.mu.Unlock()
	}()

	acquired := m.clock.Now()
	fence, ok, err := m.TryAcquire(ctx, name)
	if err != nil {
		return err
	}
	if !ok {
		return ErrHeld
	}

	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		if err := m.keep(fctx, stop, name, fence, acquired); err != nil {
			cancel(err)
		}
	}()
	fn(fctx)
	close(stop)
	<-kept
	if err := context.Cause(fctx); errors.Is(err, ErrLost) {
		return err
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), m.ttl/3)
	defer rcancel()
	m.Release(rctx, name, fence)
	return nil
}

// keep renews lease name every ttl/3 until stop closes or ctx ends, and returns an error
// wrapping ErrLost when a renewal fails.
func (m *Manager) keep(ctx context.Context, stop <-chan struct{}, name string, fence int64, last time.Time) error {
	for {
		m.clock.Wait(ctx, last.Add(m.ttl/3), stop)
		select {
		case <-stop:
			return nil
		default:
		}
		if ctx.Err() != nil {
			return nil
		}
		last = m.clock.Now()
		rctx, cancel := context.WithTimeout(ctx, m.ttl/3)
		err := m.Renew(rctx, name, fence)
		cancel()
		if err != nil && ctx.Err() == nil {
			if !errors.Is(err, ErrLost) {
				err = fmt.Errorf("%w: %w", ErrLost, err)
			}
			return err
		}
	}
}

// Campaign runs fn whenever this instance holds lease name, until ctx ends (it returns
// ctx.Err()) or fn returns by itself while holding the lease (it returns nil). A standby
// tries to take the lease every ttl/3, so it takes over within about 4/3 ttl of the holder's
// last renewal when the holder dies without releasing it, at once when the holder releases
// it. When the lease is lost fn's ctx is cancelled (see Hold) and the campaign goes on.
//
// Of all the instances campaigning for one name, at most one runs fn at a time, provided fn
// returns promptly when its ctx is cancelled and the clocks agree (see the package comment).
func (m *Manager) Campaign(ctx context.Context, name string, fn func(ctx context.Context)) error {
	for {
		err := m.Hold(ctx, name, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrHeld):
		case errors.Is(err, ErrLost):
			m.log().Warn("lease lost; campaigning again", "lease", name, "error", err)
		default:
			m.log().Error("campaign: lease database failed; trying again", "lease", name, "error", err, "retry", m.ttl/3)
		}
		m.clock.Wait(ctx, m.clock.Now().Add(m.ttl/3), nil)
	}
}
