package telegramtest

import (
	"encoding/json"
	"slices"
	"time"
)

// Bot is one bot (one token) of the fake: its identity, its update queue and its webhook. Its
// methods are safe for concurrent use.
type Bot struct {
	s     *Server
	token string
	user  User

	// Guarded by s.mu.
	nextUpdate int64
	queue      []Update        // not yet confirmed, in update_id order
	confirmed  int64           // highest update_id confirmed (0 before any)
	allowed    []string        // allowed_updates; nil for the default
	poll       *poller         // the getUpdates request parked in a long poll
	queries    map[string]bool // callback query ids received: answered?
	hook       webhook
}

// poller is a parked long poll; ending it answers that request with err.
type poller struct {
	end chan *apiError
}

var (
	errConflictPoll    = &apiError{code: 409, desc: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"}
	errConflictWebhook = &apiError{code: 409, desc: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"}
)

// Token returns the bot's token.
func (b *Bot) Token() string { return b.token }

// User returns the bot's own user, as getMe returns it.
func (b *Bot) User() User {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.user
}

// SetPrivacyMode switches the bot's privacy mode, which getMe reports as
// can_read_all_group_messages (false while it is on). New bots have it on, as on Telegram. The
// fake still delivers every update a test injects: which group messages a bot in privacy mode
// receives is the test's choice.
func (b *Bot) SetPrivacyMode(on bool) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.user.CanReadAllGroupMessages = !on
	b.s.changedLocked()
}

// Username returns the bot's username (without @).
func (b *Bot) Username() string { return b.user.Username }

// Pending returns the updates not yet confirmed, oldest first.
func (b *Bot) Pending() []Update {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return slices.Clone(b.queue)
}

// Confirmed returns the highest confirmed update_id: confirmed by a getUpdates with a higher
// offset, forgotten by a negative offset or drop_pending_updates, or accepted by the webhook.
func (b *Bot) Confirmed() int64 {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.confirmed
}

// Polling reports whether a getUpdates request is parked in a long poll.
func (b *Bot) Polling() bool {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.poll != nil
}

// WaitPolling waits until a getUpdates request is parked in a long poll.
func (b *Bot) WaitPolling(timeout time.Duration) error {
	return b.s.Wait(timeout, b.Polling)
}

// WaitConfirmed waits until update id is confirmed (see Confirmed).
func (b *Bot) WaitConfirmed(id int64, timeout time.Duration) error {
	return b.s.Wait(timeout, func() bool { return b.Confirmed() >= id })
}

// SetNextUpdateID sets the update_id of the next injected update (real ids start at an
// arbitrary number and jump to a random one after a week without updates). Ids must increase:
// a value not above the last id issued is ignored.
func (b *Bot) SetNextUpdateID(id int64) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if id > b.nextUpdate-1 && (len(b.queue) == 0 || id > b.queue[len(b.queue)-1].UpdateID) {
		b.nextUpdate = id
	}
}

// Inject queues u for the bot with the next update_id (any UpdateID in u is replaced) and
// returns it as queued. In webhook mode it is pushed to the webhook.
func (b *Bot) Inject(u Update) Update {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.enqueueLocked(u)
}

func (b *Bot) enqueueLocked(u Update) Update {
	u.UpdateID = b.nextUpdate
	b.nextUpdate++
	b.queue = append(b.queue, u)
	b.s.changedLocked()
	return u
}

// confirmLocked forgets every update with an id below offset.
func (b *Bot) confirmLocked(offset int64) {
	i := 0
	for i < len(b.queue) && b.queue[i].UpdateID < offset {
		i++
	}
	if i > 0 {
		b.confirmed = max(b.confirmed, b.queue[i-1].UpdateID)
		b.queue = slices.Delete(b.queue, 0, i)
	}
	b.confirmed = max(b.confirmed, min(offset-1, b.nextUpdate-1))
	b.s.changedLocked()
}

// dropPendingLocked forgets the whole queue (drop_pending_updates).
func (b *Bot) dropPendingLocked() {
	b.confirmLocked(b.nextUpdate)
}

// allowedLocked reports whether u passes the bot's allowed_updates.
func (b *Bot) allowedLocked(u Update) bool {
	if len(b.allowed) == 0 {
		return true // the default excludes only kinds this fake never produces
	}
	return slices.Contains(b.allowed, u.Kind())
}

// takeLocked returns up to limit deliverable updates from the queue, dropping those that
// allowed_updates excludes.
func (b *Bot) takeLocked(limit int) []Update {
	kept := b.queue[:0]
	var out []Update
	for _, u := range b.queue {
		if !b.allowedLocked(u) {
			b.confirmed = max(b.confirmed, u.UpdateID)
			continue
		}
		kept = append(kept, u)
		if len(out) < limit {
			out = append(out, u)
		}
	}
	b.queue = kept
	return out
}

// getUpdates serves getUpdates. Concurrent long polls: the request parked earlier is the one
// terminated with 409, as Telegram does; the newer one carries on.
func (s *Server) getUpdates(c *call) (any, *apiError) {
	b := c.bot
	offset, _, e := optInt(c.params, "offset")
	if e != nil {
		return nil, e
	}
	limit, hasLimit, e := optInt(c.params, "limit")
	if e != nil {
		return nil, e
	}
	if !hasLimit || limit > 100 || limit == 0 {
		limit = 100
	}
	limit = max(limit, 1)
	timeout, _, e := optInt(c.params, "timeout")
	if e != nil {
		return nil, e
	}
	var allowed []string
	if raw, ok := c.params["allowed_updates"]; ok {
		if err := json.Unmarshal([]byte(raw), &allowed); err != nil {
			return nil, badRequest("can't parse allowed updates")
		}
	}

	s.mu.Lock()
	if b.hook.url != "" {
		s.mu.Unlock()
		return nil, errConflictWebhook
	}
	if _, ok := c.params["allowed_updates"]; ok {
		b.allowed = allowed
	}
	switch {
	case offset > 0:
		b.confirmLocked(offset)
	case offset < 0:
		if n := int64(len(b.queue)) + offset; n > 0 {
			b.confirmLocked(b.queue[n].UpdateID)
		}
	}
	me := &poller{end: make(chan *apiError, 1)}
	if b.poll != nil {
		b.poll.end <- errConflictPoll
		b.poll = nil
	}
	deadline := time.NewTimer(time.Duration(max(timeout, 0)) * s.cfg.second)
	defer deadline.Stop()
	for {
		if out := b.takeLocked(int(limit)); len(out) > 0 || timeout <= 0 {
			if b.poll == me {
				b.poll = nil
			}
			s.changedLocked()
			s.mu.Unlock()
			return nonNil(out), nil
		}
		if b.poll != me {
			b.poll = me
			s.changedLocked() // the poll is now parked (announced once, or parked polls would wake each other forever)
		}
		ch := s.changed.C()
		s.mu.Unlock()
		select {
		case <-ch:
		case err := <-me.end:
			return nil, err
		case <-deadline.C:
			timeout = 0
		case <-c.ctx.Done():
			timeout = 0
		case <-s.done:
			timeout = 0
		}
		s.mu.Lock()
		select {
		case err := <-me.end: // ended while we took the lock
			s.mu.Unlock()
			return nil, err
		default:
		}
	}
}

func nonNil(u []Update) []Update {
	if u == nil {
		return []Update{}
	}
	return u
}
