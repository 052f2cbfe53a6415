package turn

import (
	"context"
	"sync"
	"time"
)

// Typing: a chat action ("typing") while a user's turn runs (Options.Typing), at most once per
// TypingEvery per chat.

// chatRates is when each chat was last sent a chat action. Its mutex is a leaf (see Engine).
type chatRates struct {
	mu   sync.Mutex // guards last
	last map[string]time.Time
}

// typing shows "typing" in the turn's chat until the returned stop is called (see
// Options.Typing). stop does not wait for a chat action in flight: the answer is not held back
// by a slow platform.
func (e *Engine) typing(ctx context.Context, it *item) (stop func()) {
	if e.opt.Typing == nil {
		return func() {}
	}
	done := make(chan struct{})
	target := outbound(it.src)
	chat := it.plugin + "\x00" + it.profile + "\x00" + target.ChatID + "\x00" + target.ThreadID
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTimer(e.opt.TypingAfter)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if e.typingDue(chat) {
				e.opt.Typing.Typing(context.WithoutCancel(ctx), it.plugin, it.profile, target)
			}
			t.Reset(e.opt.TypingEvery)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// typingDue reports whether chat may be sent a chat action now (none in the last TypingEvery),
// and if so notes it as sent.
func (e *Engine) typingDue(chat string) bool {
	now := e.opt.Now()
	r := &e.typingRate
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.last[chat]; ok && now.Sub(last) < e.opt.TypingEvery {
		return false
	}
	if len(r.last) >= 1024 {
		for c, last := range r.last {
			if now.Sub(last) >= e.opt.TypingEvery {
				delete(r.last, c)
			}
		}
	}
	r.last[chat] = now
	return true
}
