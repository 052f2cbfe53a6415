package session

import (
	"errors"
	"testing"
)

// A session's model and usage, on both backends: set and added inside the boundary, read back
// with the session, the model kept by a compression continuation (its usage starts afresh) and
// not by /new; another key's session is refused.
func TestSessionSettings(t *testing.T) {
	onBackends(t, func(t *testing.T, newEnv envOpener) {
		e := newEnv(t, Options{})
		e.t = t
		src := dm("7")
		key := e.key(src)
		first := e.resolve(src).SessionID
		err := e.k.WithBoundary(e.ctx, key, func(b *Boundary) error {
			if err := b.SetModel(first, "qwen3-8b"); err != nil {
				return err
			}
			if err := b.AddUsage(first, 100, 20, 1); err != nil {
				return err
			}
			return b.AddUsage(first, 50, 10, 2)
		})
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.k.Session(e.ctx, first)
		if err != nil || s.Model != "qwen3-8b" || s.PromptTokens != 150 || s.CompletionTokens != 30 || s.ModelCalls != 3 {
			t.Fatalf("session %+v, %v", s, err)
		}
		var cont Route
		if err := e.k.WithBoundary(e.ctx, key, func(b *Boundary) error {
			var err error
			cont, err = b.Compress(first, "summary")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if s, err := e.k.Session(e.ctx, cont.SessionID); err != nil || s.Model != "qwen3-8b" || s.ModelCalls != 0 {
			t.Fatalf("continuation %+v, %v", s, err)
		}
		var fresh Route
		if err := e.k.WithBoundary(e.ctx, key, func(b *Boundary) error {
			var err error
			fresh, err = b.Reset("")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if s, err := e.k.Session(e.ctx, fresh.SessionID); err != nil || s.Model != "" {
			t.Fatalf("after /new %+v, %v", s, err)
		}
		other := e.key(dm("8"))
		e.resolve(dm("8"))
		err = e.k.WithBoundary(e.ctx, other, func(b *Boundary) error { return b.SetModel(fresh.SessionID, "x") })
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("another key's session: %v", err)
		}
	})
}
