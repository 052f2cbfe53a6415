package turn

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// streamer shows an answer while the agent writes it, on a platform that can edit messages: the
// first text is posted at once, later text replaces it in place, at most once per
// Options.EditInterval per chat and Options.EditsPerSecond per bot; the final text is put in
// place by finish. Posts and edits go
// through the ledger with the turn's guard, so a /new during the turn stops them too, and each is
// enqueued in one unit of work with the check that the turn's inbox rows are still this host's
// and running (holds): a host paused past its lease, whose turn another host adopted, or whose
// turn a user's command on another host cancelled, posts nothing more when it resumes.
//
// The draft rule: a post or edit whose outcome is unknown (the platform may have applied it)
// stops streaming into that draft; nothing is posted again in its place. If the draft's first
// post is the one whose outcome is unknown, the draft may or may not be in the chat, with part of
// the answer: the finished answer is then sent once as a new message that says it completes an
// interrupted draft (DraftResumed), linked to the draft in the ledger (Message.Link). If a
// later edit's outcome is unknown, the draft exists; finish edits it once more to the final text
// (an edit never duplicates). The same text is never posted twice in full.
type streamer struct {
	e      *Engine
	key    string
	msg    delivery.Message // plugin, profile, key, target, guard, stamp, generation
	origin string
	rows   []string // the turn's inbox rows: the fence of every post and edit (see enqueue)

	mu      sync.Mutex
	latest  string
	changed chan struct{} // buffered(1)
	stop    chan struct{}
	stopped chan struct{}
	msgID   string // the posted message; "" until the first post is delivered
	shown   string // the text the chat shows
	// lost is the ledger group of a first post whose outcome is unknown ("" for none): the
	// draft that may be in the chat with part of the answer.
	lost string
}

// DraftResumed is the first line of an answer sent as a new message because the streamed draft's
// first post has an unknown outcome (it may be in the chat, cut off).
const DraftResumed = "↪ The complete answer (the draft above was interrupted):"

// DraftStopped ends a streamed draft whose turn was stopped (/stop, /new, a recall).
const DraftStopped = "(stopped)"

// streamSuffix marks a message that is still being written.
const streamSuffix = " …"

func (e *Engine) newStreamer(key string, msg delivery.Message, rows []string) *streamer {
	s := &streamer{e: e, key: key, msg: msg, origin: msg.Origin, rows: rows, changed: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go s.run()
	return s
}

// update is Turn.OnText: it records the text so far and wakes the loop.
func (s *streamer) update(text string) {
	s.mu.Lock()
	s.latest = text
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// started reports whether the agent wrote any text into the stream: a turn that streamed is not
// tried again (the draft may be in the chat).
func (s *streamer) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest != ""
}

// chatKey names the chat an edit rate applies to.
func (s *streamer) chatKey() string {
	return s.msg.Plugin + "\x00" + s.msg.Profile + "\x00" + s.msg.Target.ChatID
}

// botKey names the bot a bot-wide edit rate applies to.
func (s *streamer) botKey() string { return s.msg.Plugin + "\x00" + s.msg.Profile }

// editRates is when each chat was last posted to or edited by a stream, and when each bot (a
// plugin's profile) may stream its next post or edit. Its mutex is a leaf (see Engine).
type editRates struct {
	mu       sync.Mutex           // guards lastEdit and botNext
	lastEdit map[string]time.Time // a chat's last streamed post or edit
	botNext  map[string]time.Time // when a bot may stream its next post or edit
}

func newEditRates() editRates {
	return editRates{lastEdit: map[string]time.Time{}, botNext: map[string]time.Time{}}
}

// claim takes the slot of chat and bot at now if both are free (chat's last post or edit at
// least interval ago, bot's next slot reached), reserving the bot's next one gap later; if not,
// it reports when they will be.
func (r *editRates) claim(chat, bot string, now time.Time, interval, gap time.Duration) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.lastEdit[chat].Add(interval)
	if b := r.botNext[bot]; b.After(next) {
		next = b
	}
	if now.Before(next) {
		return next, false
	}
	if len(r.lastEdit) >= 1024 {
		// Forget the chats whose interval has passed: their entry no longer holds anything
		// back, and kept they would grow with every chat ever streamed to.
		for c, last := range r.lastEdit {
			if now.Sub(last) >= interval {
				delete(r.lastEdit, c)
			}
		}
	}
	r.lastEdit[chat] = now
	r.botNext[bot] = now.Add(gap)
	return now, true
}

// sent records that chat's streamed post or edit had its outcome at now: the chat's interval
// runs from then, not from the claim (the send happened somewhere in between).
func (r *editRates) sent(chat string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastEdit[chat] = now
}

// waitGate waits until the chat may be edited again (Options.EditInterval since its last post
// or edit) and the bot may send again (Options.EditsPerSecond over all its chats), then claims
// both slots. It reports false when stop closed first (unless force).
func (s *streamer) waitGate(force bool) bool {
	gap := time.Duration(float64(time.Second) / s.e.opt.EditsPerSecond)
	for {
		now := time.Now()
		next, ok := s.e.edits.claim(s.chatKey(), s.botKey(), now, s.e.opt.EditInterval, gap)
		if ok {
			return true
		}
		t := time.NewTimer(next.Sub(now))
		if force {
			<-t.C
			continue
		}
		select {
		case <-t.C:
		case <-s.stop:
			t.Stop()
			return false
		}
	}
}

func (s *streamer) run() {
	defer close(s.stopped)
	for {
		select {
		case <-s.changed:
		case <-s.stop:
			return
		}
		if !s.waitGate(false) {
			return
		}
		s.mu.Lock()
		text := s.latest
		s.mu.Unlock()
		if !s.show(text+streamSuffix, false) {
			return
		}
	}
}

// show posts text (first) or edits the posted message to it, and waits for the outcome. Only
// the first part of a long text is shown while streaming; final marks the answer's final text
// (recorded as a reply, not a draft). It reports whether streaming can go on.
func (s *streamer) show(text string, final bool) bool {
	parts := s.e.ledger.Split(s.msg.Plugin, text)
	if len(parts) == 0 {
		return true
	}
	first := parts[0] // while streaming, a text longer than one message shows its first part
	s.mu.Lock()
	if first == s.shown {
		s.mu.Unlock()
		return true
	}
	id := s.msgID
	s.mu.Unlock()
	m := s.msg
	m.Text, m.Parts = first, []string{first}
	if !final {
		m.Kind = delivery.KindDraft
	}
	if id != "" {
		m.Target.EditMessageID = id
		m.Target.ReplyTo = ""
	}
	group, err := s.enqueue(m, stRunning)
	if errors.Is(err, errOvertaken) {
		s.e.log.Debug("turn: the streamed turn is no longer this host's; streaming stops", "key", s.key)
		return false
	}
	if err != nil {
		s.e.log.Warn("turn: streaming an answer failed", "key", s.key, "error", err)
		return false
	}
	row, err := s.e.ledger.Wait(s.e.ctx, group)
	// The chat's interval runs from the outcome too: the send happened between the claim
	// (waitGate) and now, not necessarily at the claim.
	s.e.edits.sent(s.chatKey(), time.Now())
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if row.State != delivery.Delivered {
		if id == "" && row.Uncertain() {
			s.lost = group // the draft may be in the chat: finish sends the answer as its completion
		}
		return false
	}
	if s.msgID == "" && len(row.MessageIDs) > 0 {
		s.msgID = row.MessageIDs[0]
	}
	s.shown = first
	return s.msgID != ""
}

// finish stops the loop and puts the final text in place: its first part into the streamed
// message, the rest as new messages (parts, already capped). It reports false when nothing was
// streamed (the caller sends the answer the usual way; see completes).
func (s *streamer) finish(parts []string) bool {
	s.halt()
	s.mu.Lock()
	id := s.msgID
	s.mu.Unlock()
	if id == "" || len(parts) == 0 {
		return false
	}
	s.waitGate(true)
	s.show(parts[0], true)
	if len(parts) > 1 {
		m := s.msg
		m.Parts = parts[1:]
		m.Text = parts[1]
		m.Target.ReplyTo = ""
		if _, err := s.enqueue(m, stRunning); err != nil && !errors.Is(err, errOvertaken) {
			s.e.log.Warn("turn: sending the rest of a streamed answer failed", "key", s.key, "error", err)
		}
	}
	return true
}

// finishStopped finalises the draft of a turn that was stopped (/stop, /new, a recall): one last edit
// puts the text the chat shows without the still-writing mark, and DraftStopped after it. The
// edit is not guarded by the turn (the command superseded it; the draft is in the chat either
// way), but it is fenced by the rows' owner: a host whose turn another host adopted leaves the
// draft to it. A draft whose first post has an unknown outcome is left alone (the draft rule).
func (s *streamer) finishStopped() {
	s.halt()
	s.mu.Lock()
	id, shown := s.msgID, s.shown
	s.mu.Unlock()
	if id == "" || shown == "" {
		return
	}
	parts := s.e.ledger.Split(s.msg.Plugin, strings.TrimSuffix(shown, streamSuffix)+"\n\n"+DraftStopped)
	if len(parts) == 0 {
		return
	}
	m := s.msg
	m.Kind, m.Guard, m.Stamp, m.Generation = delivery.KindDraft, delivery.GuardNone, session.Stamp{}, 0
	m.Text, m.Parts = parts[0], parts[:1]
	m.Target.EditMessageID, m.Target.ReplyTo = id, ""
	s.waitGate(true)
	if _, err := s.enqueue(m, ""); err != nil && !errors.Is(err, errOvertaken) {
		s.e.log.Warn("turn: finalising a stopped turn's draft failed", "key", s.key, "error", err)
	}
}

// enqueue queues m in one unit of work with the check that the turn's inbox rows are still this
// host's and in state (any state for ""); errOvertaken, with nothing queued, when they are not.
func (s *streamer) enqueue(m delivery.Message, state string) (string, error) {
	var group string
	err := s.e.write(func(ctx context.Context, t *store.Tx) error {
		ok, err := s.e.holds(ctx, t, s.rows, state)
		if err != nil {
			return err
		}
		if !ok {
			return errOvertaken
		}
		group, err = s.e.ledger.EnqueueTx(ctx, t, m)
		return err
	})
	return group, err
}

// completes returns the ledger group of the draft the answer completes, once finish reported
// false: the draft's first post had an unknown outcome, so the answer goes out as a new message
// marked as its completion (DraftResumed). "" when no draft may be in the chat.
func (s *streamer) completes() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// halt stops the loop and waits for it.
func (s *streamer) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.stopped
}

// streamMessage is the delivery message a streamed answer uses.
func streamMessage(plugin, profile, key string, target abi.OutboundMessage, st session.Stamp, origin string) delivery.Message {
	return delivery.Message{Plugin: plugin, Profile: profile, Key: key, Target: target, Kind: delivery.KindReply,
		Guard: delivery.GuardWork, Stamp: st, Generation: st.Generation, Origin: origin}
}
