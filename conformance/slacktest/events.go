package slacktest

import (
	"encoding/json"
	"fmt"
	"time"
)

// Posted is what an event builder did: the message's ts (for message events) and the events
// queued for delivery, in order.
type Posted struct {
	TS        string
	EventIDs  []string
	Envelopes []*Envelope
}

// pending is one event on its way to the app, over HTTP or Socket Mode.
type pending struct {
	env     *Envelope
	id      string
	body    []byte
	acked   bool
	gaveUp  bool
	started bool // handed to a transport
	// frameType is the Socket Mode frame it goes in: "" for events_api, "interactive" for an
	// interactivity payload (body), which goes over Socket Mode only.
	frameType string

	// Socket Mode
	envelopeID  string   // of the frame in flight ("" before the next attempt)
	envelopeIDs []string // every envelope id the event was sent in
	attempt     int      // retry_attempt of the next (or current) frame
	reason      string   // retry_reason of the next frame
	sentOn      *sockConn
	sentAt      time.Time
}

// Say queues a top-level message from user in a channel: one "message" event.
func (t *Team) Say(channelID, user, text string) Posted {
	return t.post(channelID, "", user, text, false)
}

// Mention queues a top-level message from user that mentions the bot ("<@BOT> text"): a
// "message" event and an "app_mention" event for the same ts, with different event ids, as
// Slack delivers them to an app subscribed to both.
func (t *Team) Mention(channelID, user, text string) Posted {
	return t.post(channelID, "", user, t.MentionText(text), true)
}

// Reply queues a thread reply (thread = the root's ts) from user.
func (t *Team) Reply(channelID, thread, user, text string) Posted {
	return t.post(channelID, thread, user, text, false)
}

// MentionReply queues a thread reply that mentions the bot: "message" and "app_mention".
func (t *Team) MentionReply(channelID, thread, user, text string) Posted {
	return t.post(channelID, thread, user, t.MentionText(text), true)
}

// MentionText is text with the bot's mention in front, as Slack encodes it.
func (t *Team) MentionText(text string) string { return "<@" + t.BotUser + "> " + text }

// DM queues a direct message from user to the bot (opening the DM channel if needed).
func (t *Team) DM(user, text string) Posted {
	return t.post(t.AddDM(user), "", user, text, false)
}

// DMReply queues a reply in a thread of the DM with user (an assistant thread, for instance).
func (t *Team) DMReply(user, thread, text string) Posted {
	return t.post(t.AddDM(user), thread, user, text, false)
}

// AssistantThreadStarted opens an assistant thread in the DM with user, as Slack does when the
// user clicks the app's assistant entry point while looking at contextChannel: the thread's root
// message is created and an "assistant_thread_started" event is queued. Posted.TS is the
// thread's ts.
func (t *Team) AssistantThreadStarted(user, contextChannel string) Posted {
	s := t.s
	dm := t.AddDM(user)
	s.mu.Lock()
	root := &Message{Team: t.ID, Channel: dm, TS: s.nextTSLocked(), User: t.BotUser, BotID: t.BotID,
		Text: "Hi, how can I help?", Time: s.cfg.clock.Now()}
	s.messages = append(s.messages, root)
	ev := Event{Type: "assistant_thread_started", EventTS: root.TS, AssistantThread: &AssistantThread{
		UserID: user, ChannelID: dm, ThreadTS: root.TS,
		Context: AssistantThreadContext{ChannelID: contextChannel, TeamID: t.ID}}}
	env := s.enqueueLocked(t, ev)
	s.mu.Unlock()
	return Posted{TS: root.TS, EventIDs: []string{env.EventID}, Envelopes: []*Envelope{env}}
}

// Edit changes a message's text and queues a "message_changed" event.
func (t *Team) Edit(channelID, ts, text string) Posted {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.findLocked(t.ID, channelID, ts)
	if m == nil {
		panic("slacktest: Edit of an unknown message " + ts)
	}
	prev := t.messageEventLocked(m)
	m.Edits = append(m.Edits, m.Text)
	m.Text = text
	cur := t.messageEventLocked(m)
	cur.Channel, cur.ChannelType, cur.EventTS = "", "", ""
	prev.Channel, prev.ChannelType, prev.EventTS = "", "", ""
	ev := Event{Type: "message", Subtype: "message_changed", Hidden: true, Channel: channelID,
		ChannelType: t.channelType(channelID), TS: s.nextTSLocked(), Message: &cur, PreviousMessage: &prev}
	ev.EventTS = ev.TS
	env := s.enqueueLocked(t, ev)
	return Posted{TS: ts, EventIDs: []string{env.EventID}, Envelopes: []*Envelope{env}}
}

// Delete removes a message and queues a "message_deleted" event.
func (t *Team) Delete(channelID, ts string) Posted {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var prev Event
	for i, m := range s.messages {
		if m.Team == t.ID && m.Channel == channelID && m.TS == ts {
			prev = t.messageEventLocked(m)
			prev.Channel, prev.ChannelType, prev.EventTS = "", "", ""
			s.messages = append(s.messages[:i:i], s.messages[i+1:]...)
			break
		}
	}
	ev := Event{Type: "message", Subtype: "message_deleted", Hidden: true, Channel: channelID,
		ChannelType: t.channelType(channelID), TS: s.nextTSLocked(), DeletedTS: ts, PreviousMessage: &prev}
	ev.EventTS = ev.TS
	env := s.enqueueLocked(t, ev)
	return Posted{TS: ts, EventIDs: []string{env.EventID}, Envelopes: []*Envelope{env}}
}

// SystemMessage adds a message nobody can start a thread on (a channel rename, say), without
// an event; a reply to it is cannot_reply_to_message.
func (t *Team) SystemMessage(channelID, text string) string {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &Message{Team: t.ID, Channel: channelID, TS: s.nextTSLocked(), Text: text, System: true, Time: s.cfg.clock.Now()}
	s.messages = append(s.messages, m)
	s.changedLocked()
	return m.TS
}

// Inject queues an arbitrary inner event for the team.
func (t *Team) Inject(ev Event) Posted {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	env := s.enqueueLocked(t, ev)
	return Posted{TS: ev.TS, EventIDs: []string{env.EventID}, Envelopes: []*Envelope{env}}
}

// Envelope builds an event_callback for ev without queueing it (for Forge and raw tests).
func (t *Team) Envelope(ev Event) *Envelope {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.envelopeLocked(t, ev)
}

// post stores a user message and queues its events.
func (t *Team) post(channelID, thread, user, text string, mention bool) Posted {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := t.channels[channelID]
	if ch == nil {
		panic("slacktest: unknown channel " + channelID + " in team " + t.ID)
	}
	m := &Message{Team: t.ID, Channel: channelID, TS: s.nextTSLocked(), ThreadTS: thread, User: user, Text: text,
		Time: s.cfg.clock.Now()}
	s.messages = append(s.messages, m)
	out := Posted{TS: m.TS}
	ev := t.messageEventLocked(m)
	env := s.enqueueLocked(t, ev)
	out.EventIDs, out.Envelopes = append(out.EventIDs, env.EventID), append(out.Envelopes, env)
	if mention {
		am := ev
		am.Type, am.ChannelType, am.ClientMsgID = "app_mention", "", ""
		env := s.enqueueLocked(t, am)
		out.EventIDs, out.Envelopes = append(out.EventIDs, env.EventID), append(out.Envelopes, env)
	}
	return out
}

// messageEventLocked is the "message" event of m. s.mu must be held.
func (t *Team) messageEventLocked(m *Message) Event {
	ch := t.channels[m.Channel]
	ev := Event{Type: "message", User: m.User, BotID: m.BotID, Text: m.Text, TS: m.TS, ThreadTS: m.ThreadTS,
		Channel: m.Channel, Team: t.ID, EventTS: m.TS}
	if ch != nil {
		ev.ChannelType = ch.typ
	}
	if m.BotID != "" {
		ev.AppID = DefaultAppID
	} else {
		ev.ClientMsgID = fmt.Sprintf("00000000-0000-4000-8000-%012d", t.s.seq)
	}
	if m.ThreadTS != "" {
		if root := t.s.findLocked(t.ID, m.Channel, m.ThreadTS); root != nil {
			ev.ParentUserID = root.User
		}
	}
	for _, id := range m.Files {
		if f := t.s.fileLocked(id); f != nil {
			ev.Subtype, ev.Upload = "file_share", f.Uploader == ""
			ev.Files = append(ev.Files, t.s.eventFile(f, m.User))
		}
	}
	return ev
}

// echoLocked queues the "message" event of the bot's own post. s.mu must be held.
func (s *Server) echoLocked(t *Team, ch *channel, m *Message) {
	s.enqueueLocked(t, t.messageEventLocked(m))
}

// envelopeLocked wraps ev in an event_callback with a new event id. s.mu must be held.
func (s *Server) envelopeLocked(t *Team, ev Event) *Envelope {
	s.eventSeq++
	return &Envelope{
		Token: VerificationToken, TeamID: t.ID, APIAppID: DefaultAppID, Event: ev, Type: "event_callback",
		EventID: fmt.Sprintf("Ev%09X", s.eventSeq), EventTime: s.cfg.clock.Now().Unix(),
		Authorizations: []Authorization{{TeamID: t.ID, UserID: t.BotUser, IsBot: true}},
		EventContext:   fmt.Sprintf("4-eyJldCI6Im1lc3NhZ2UiLCJ0aWQiOiIlcyJ9-%d", s.eventSeq),
	}
}

// enqueueLocked wraps ev and queues it for delivery. s.mu must be held.
func (s *Server) enqueueLocked(t *Team, ev Event) *Envelope {
	env := s.envelopeLocked(t, ev)
	body, _ := json.Marshal(env)
	p := &pending{env: env, id: env.EventID, body: body}
	s.envelopes[p.id] = p
	s.queue = append(s.queue, p)
	s.changedLocked()
	s.routeLocked()
	return env
}

// routeLocked hands queued events to the active transport: Socket Mode connections when Socket
// Mode is on, else the Request URL; without either they wait. s.mu must be held.
func (s *Server) routeLocked() {
	switch {
	case s.socketMode:
		// the Socket Mode loop picks the queue up at this change
	case s.requestURL != "":
		keep := s.queue[:0]
		for _, p := range s.queue {
			if p.frameType != "" {
				keep = append(keep, p) // Socket Mode only: waits for it
				continue
			}
			if !p.started {
				p.started = true
				s.workers.Add(1)
				go s.deliverHTTP(p)
			}
		}
		s.queue = keep
	}
}

// EventIDs returns the ids of every event queued so far, oldest first.
func (s *Server) EventIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i := int64(1); i <= s.eventSeq; i++ {
		id := fmt.Sprintf("Ev%09X", i)
		if _, ok := s.envelopes[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// Acked reports whether the app acknowledged the event (a 2xx in time, or a Socket Mode ack).
func (s *Server) Acked(eventID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.envelopes[eventID]
	return p != nil && p.acked
}

// GaveUp reports whether the fake stopped retrying the event without an acknowledgement.
func (s *Server) GaveUp(eventID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.envelopes[eventID]
	return p != nil && p.gaveUp
}

// WaitAcked waits until every event in ids was acknowledged.
func (s *Server) WaitAcked(timeout time.Duration, ids ...string) error {
	return s.Wait(timeout, func() bool {
		for _, id := range ids {
			if !s.Acked(id) {
				return false
			}
		}
		return true
	})
}

// WaitSettled waits until every queued event was acknowledged or given up on.
func (s *Server) WaitSettled(timeout time.Duration) error {
	return s.Wait(timeout, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range s.envelopes {
			if !p.acked && !p.gaveUp {
				return false
			}
		}
		return true
	})
}

// channelType is the channel_type of a channel ("" for one the team does not have). s.mu must be
// held.
func (t *Team) channelType(id string) string {
	if c := t.channels[id]; c != nil {
		return c.typ
	}
	return ""
}
