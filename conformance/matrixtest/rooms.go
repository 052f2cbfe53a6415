package matrixtest

import (
	"fmt"
	"strings"
)

// Room is a room on the server.
type Room struct {
	s         *Server
	ID        string
	Name      string
	members   map[string]string // user id -> membership
	encrypted bool
	typing    []bool
}

// Message is what a user says with Room.Say.
type Message struct {
	Body string
	// Mentions are m.mentions.user_ids; nil omits m.mentions (a client without intentional
	// mentions), NoMentions sends an empty m.mentions.
	Mentions   []string
	NoMentions bool
	Room       bool   // m.mentions.room (@room)
	Thread     string // root event id: an m.thread relation
	ReplyTo    string // m.in_reply_to event id
	// Fallback marks a thread message as Element sends one that is not a reply within the
	// thread (is_falling_back with the thread's latest event as in_reply_to).
	Fallback string
}

// CreateRoom creates a room (not encrypted) with the bot and members joined, and returns it.
// Its creation events come before anything said in it.
func (s *Server) CreateRoom(name string, members ...string) *Room {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.rooms) + 1
	r := &Room{s: s, ID: fmt.Sprintf("!room%03d:%s", n, DefaultServerName), Name: name, members: map[string]string{}}
	s.rooms[r.ID] = r
	creator := DefaultBotUserID
	if len(members) > 0 {
		creator = members[0]
	}
	empty := ""
	s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.create", Sender: creator, StateKey: &empty, Content: map[string]any{"room_version": "11"}})
	for _, m := range append([]string{creator}, members...) {
		if r.members[m] == "join" {
			continue
		}
		key := m
		name := m
		if u := s.byID[m]; u != nil {
			name = u.Name
		}
		s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.member", Sender: m, StateKey: &key,
			Content: map[string]any{"membership": "join", "displayname": name}})
	}
	if r.members[DefaultBotUserID] != "join" {
		key := DefaultBotUserID
		s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.member", Sender: DefaultBotUserID, StateKey: &key,
			Content: map[string]any{"membership": "join", "displayname": DefaultBotName}})
	}
	if name != "" {
		s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.name", Sender: creator, StateKey: &empty, Content: map[string]any{"name": name}})
	}
	return r
}

// CreateInvite creates a room of inviter's, with the bot invited (not joined).
func (s *Server) CreateInvite(name, inviter string, encrypted bool) *Room {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.rooms) + 1
	r := &Room{s: s, ID: fmt.Sprintf("!room%03d:%s", n, DefaultServerName), Name: name, members: map[string]string{}}
	s.rooms[r.ID] = r
	empty, key, bot := "", inviter, DefaultBotUserID
	s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.create", Sender: inviter, StateKey: &empty, Content: map[string]any{"room_version": "11"}})
	s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.member", Sender: inviter, StateKey: &key, Content: map[string]any{"membership": "join"}})
	if name != "" {
		s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.name", Sender: inviter, StateKey: &empty, Content: map[string]any{"name": name}})
	}
	if encrypted {
		s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.encryption", Sender: inviter, StateKey: &empty,
			Content: map[string]any{"algorithm": "m.megolm.v1.aes-sha2"}})
	}
	s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.member", Sender: inviter, StateKey: &bot, Content: map[string]any{"membership": "invite"}})
	return r
}

// Room returns the room with id (nil if none).
func (s *Server) Room(id string) *Room {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rooms[id]
}

// Say posts a message from sender (who must be joined) and returns the event.
func (r *Room) Say(sender string, m Message) *Event {
	content := map[string]any{"msgtype": "m.text", "body": m.Body}
	if m.Mentions != nil || m.NoMentions || m.Room {
		mentions := map[string]any{}
		if len(m.Mentions) > 0 {
			mentions["user_ids"] = m.Mentions
		}
		if m.Room {
			mentions["room"] = true
		}
		content["m.mentions"] = mentions
	}
	switch {
	case m.Thread != "":
		rel := map[string]any{"rel_type": "m.thread", "event_id": m.Thread}
		switch {
		case m.ReplyTo != "":
			rel["m.in_reply_to"] = map[string]any{"event_id": m.ReplyTo}
		case m.Fallback != "":
			rel["is_falling_back"] = true
			rel["m.in_reply_to"] = map[string]any{"event_id": m.Fallback}
		}
		content["m.relates_to"] = rel
	case m.ReplyTo != "":
		content["m.relates_to"] = map[string]any{"m.in_reply_to": map[string]any{"event_id": m.ReplyTo}}
	}
	return r.Inject(sender, "m.room.message", content)
}

// Inject posts an event of any type and content from sender.
func (r *Room) Inject(sender, evType string, content map[string]any) *Event {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendLocked(&Event{RoomID: r.ID, Type: evType, Sender: sender, Content: content})
}

// Edit posts sender's edit (m.replace) of event id with a new body.
func (r *Room) Edit(sender, id, body string) *Event {
	return r.Inject(sender, "m.room.message", map[string]any{"msgtype": "m.text", "body": "* " + body,
		"m.new_content": map[string]any{"msgtype": "m.text", "body": body},
		"m.relates_to":  map[string]any{"rel_type": "m.replace", "event_id": id}})
}

// Encrypt turns on end-to-end encryption (an m.room.encryption state event from sender).
func (r *Room) Encrypt(sender string) *Event {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	empty := ""
	return s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.encryption", Sender: sender, StateKey: &empty,
		Content: map[string]any{"algorithm": "m.megolm.v1.aes-sha2"}})
}

// SayEncrypted posts an m.room.encrypted event from sender (opaque ciphertext).
func (r *Room) SayEncrypted(sender string) *Event {
	return r.Inject(sender, "m.room.encrypted", map[string]any{"algorithm": "m.megolm.v1.aes-sha2",
		"ciphertext": "AwgAEnAc1ph3rtext", "device_id": "ANNDEVICE", "sender_key": "c2VuZGVya2V5", "session_id": "c2Vzc2lvbg"})
}

// Join makes user join the room.
func (r *Room) Join(user string) *Event {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	key, name := user, user
	if u := s.byID[user]; u != nil {
		name = u.Name
	}
	return s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.member", Sender: user, StateKey: &key,
		Content: map[string]any{"membership": "join", "displayname": name}})
}

// Encrypted reports whether the room has an m.room.encryption state event.
func (r *Room) Encrypted() bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.encrypted
}

// Membership returns user's membership ("join", "invite", "" for none).
func (r *Room) Membership(user string) string {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.members[user]
}

// Typing returns the typing notifications the room received (true: typing), in order.
func (r *Room) Typing() []bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return append([]bool(nil), r.typing...)
}

// BotMessages returns the bot's m.room.message events in the room, edits included, in order.
func (r *Room) BotMessages() []*Event {
	var out []*Event
	for _, e := range r.s.Events(r.ID) {
		if e.Sender == DefaultBotUserID && e.Type == "m.room.message" {
			out = append(out, e)
		}
	}
	return out
}

// Posted returns the bodies of the bot's messages (not edits) in thread ("" for the room's main
// timeline: messages without an m.thread relation), in order.
func (r *Room) Posted(thread string) []string {
	var out []string
	for _, e := range r.BotMessages() {
		rel, _ := e.Content["m.relates_to"].(map[string]any)
		if rt, _ := rel["rel_type"].(string); rt == "m.replace" {
			continue
		}
		t := ""
		if rt, _ := rel["rel_type"].(string); rt == "m.thread" {
			t, _ = rel["event_id"].(string)
		}
		if t == thread {
			out = append(out, e.Body())
		}
	}
	return out
}

// Has reports whether any bot message in thread contains sub.
func (r *Room) Has(thread, sub string) bool {
	for _, b := range r.Posted(thread) {
		if strings.Contains(b, sub) {
			return true
		}
	}
	return false
}

// Pings returns whom the event notifies by mention, as the push rules of the Matrix
// specification (v1.7 on) decide: with m.mentions, its user_ids, and "@room" when room is true;
// without m.mentions (a legacy client), "@room" when the body contains it, and each user whose
// MXID the body contains.
func (s *Server) Pings(e *Event) []string {
	var out []string
	if m, ok := e.Content["m.mentions"].(map[string]any); ok {
		if ids, ok := m["user_ids"].([]any); ok {
			for _, id := range ids {
				if s, ok := id.(string); ok {
					out = append(out, s)
				}
			}
		}
		if room, _ := m["room"].(bool); room {
			out = append(out, "@room")
		}
		return out
	}
	body := e.Body()
	if strings.Contains(body, "@room") {
		out = append(out, "@room")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.byID {
		if strings.Contains(body, id) {
			out = append(out, id)
		}
	}
	return out
}
