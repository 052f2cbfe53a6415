package discordtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Gateway opcodes.
const (
	OpDispatch       = 0
	OpHeartbeat      = 1
	OpIdentify       = 2
	OpPresence       = 3
	OpVoiceState     = 4
	OpResume         = 6
	OpReconnect      = 7
	OpRequestMembers = 8
	OpInvalidSession = 9
	OpHello          = 10
	OpHeartbeatACK   = 11
)

// Intents the fake reads from IDENTIFY.
const (
	IntentGuilds         = 1 << 0
	IntentGuildMessages  = 1 << 9
	IntentDirectMessages = 1 << 12
	IntentMessageContent = 1 << 15
)

// Identify is an IDENTIFY the fake received.
type Identify struct {
	Conn     int
	Token    string // as sent ("Bot " prefix allowed)
	Intents  int64
	Accepted bool
	At       time.Time
}

// Resume is a RESUME the fake received.
type Resume struct {
	Conn      int
	SessionID string
	Seq       int64
	Accepted  bool // false: answered op 9 invalid session
	At        time.Time
}

// Heartbeat is a heartbeat the fake received.
type Heartbeat struct {
	Conn  int
	Seq   *int64 // d: the last sequence the client saw (nil: null)
	Acked bool
	At    time.Time
}

type dispatch struct {
	T string
	D json.RawMessage
}

type session struct {
	id    string
	log   []dispatch // seq = index + 1
	conn  *gwConn
	ended bool
}

type gwConn struct {
	s      *Server
	id     int
	c      *websocket.Conn
	sess   *session
	next   int // index into sess.log of the next event to write
	zombie bool
	wake   chan struct{}
	done   chan struct{}
}

type frame struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
	S  *int64          `json:"s,omitempty"`
	T  string          `json:"t,omitempty"`
}

func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(1 << 20)
	s.mu.Lock()
	s.connsOpened++
	gc := &gwConn{s: s, id: s.connsOpened, c: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.conns = append(s.conns, gc)
	interval := s.interval
	s.changedLocked()
	s.mu.Unlock()
	defer gc.gone()
	go gc.pump()
	gc.write(map[string]any{"op": OpHello, "d": map[string]any{"heartbeat_interval": interval.Milliseconds()}})
	ctx := context.WithoutCancel(r.Context())
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			gc.closed(err)
			return
		}
		if typ != websocket.MessageText {
			s.mu.Lock()
			s.violationLocked("conn %d: a binary frame (the fake speaks encoding=json)", gc.id)
			s.mu.Unlock()
			continue
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			s.mu.Lock()
			s.violationLocked("conn %d: a frame that is not JSON: %v", gc.id, err)
			s.mu.Unlock()
			continue
		}
		gc.handle(&f)
	}
}

func (gc *gwConn) write(v any) {
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(gc.s.ctx, 5*time.Second)
	defer cancel()
	gc.c.Write(ctx, websocket.MessageText, b)
}

func (gc *gwConn) kick() {
	select {
	case gc.wake <- struct{}{}:
	default:
	}
}

// pump writes the session's events to the connection while it is the session's.
func (gc *gwConn) pump() {
	s := gc.s
	for {
		select {
		case <-gc.wake:
		case <-gc.done:
			return
		case <-s.ctx.Done():
			return
		}
		for {
			s.mu.Lock()
			sess := gc.sess
			if sess == nil || sess.conn != gc || gc.zombie || gc.next >= len(sess.log) {
				s.mu.Unlock()
				break
			}
			d := sess.log[gc.next]
			gc.next++
			seq := int64(gc.next)
			drop := s.dropNext
			s.dropNext = false
			s.mu.Unlock()
			gc.write(map[string]any{"op": OpDispatch, "t": d.T, "s": seq, "d": d.D})
			if drop {
				gc.c.CloseNow()
				return
			}
		}
	}
}

// handle acts on one frame from the client.
func (gc *gwConn) handle(f *frame) {
	s := gc.s
	switch f.Op {
	case OpHeartbeat:
		var seq *int64
		if len(f.D) > 0 && string(f.D) != "null" {
			var n int64
			if json.Unmarshal(f.D, &n) == nil {
				seq = &n
			}
		}
		s.mu.Lock()
		ack := !gc.zombie
		s.heartbeats = append(s.heartbeats, Heartbeat{Conn: gc.id, Seq: seq, Acked: ack, At: time.Now()})
		s.changedLocked()
		s.mu.Unlock()
		if ack {
			gc.write(map[string]any{"op": OpHeartbeatACK})
		}
	case OpIdentify:
		var d struct {
			Token   string `json:"token"`
			Intents int64  `json:"intents"`
		}
		json.Unmarshal(f.D, &d)
		s.mu.Lock()
		ok := strings.TrimPrefix(d.Token, "Bot ") == s.token
		s.identifies = append(s.identifies, Identify{Conn: gc.id, Token: d.Token, Intents: d.Intents, Accepted: ok, At: time.Now()})
		s.changedLocked()
		if !ok {
			s.mu.Unlock()
			gc.c.Close(4004, "Authentication failed.")
			return
		}
		if gc.sess != nil {
			s.mu.Unlock()
			gc.c.Close(4005, "Already authenticated.")
			return
		}
		sess := &session{id: randomHex(16)}
		ready, _ := json.Marshal(map[string]any{"v": 10, "user": s.bot, "session_id": sess.id,
			"resume_gateway_url": s.GatewayURL(), "guilds": []any{map[string]any{"id": DefaultGuildID, "unavailable": true}},
			"application": map[string]any{"id": s.bot.ID}})
		sess.log = append([]dispatch{{T: "READY", D: ready}, {T: "GUILD_CREATE", D: s.guildJSONLocked(DefaultGuildID)}}, s.pending...)
		s.pending = nil
		if old := s.sess; old != nil && old.conn != nil && old.conn != gc {
			old.conn.sess = nil
		}
		s.sess = sess
		s.sessions = append(s.sessions, sess)
		sess.conn, gc.sess, gc.next = gc, sess, 0
		s.mu.Unlock()
		gc.kick()
	case OpResume:
		var d struct {
			Token     string `json:"token"`
			SessionID string `json:"session_id"`
			Seq       int64  `json:"seq"`
		}
		json.Unmarshal(f.D, &d)
		s.mu.Lock()
		if strings.TrimPrefix(d.Token, "Bot ") != s.token {
			s.resumes = append(s.resumes, Resume{Conn: gc.id, SessionID: d.SessionID, Seq: d.Seq, At: time.Now()})
			s.changedLocked()
			s.mu.Unlock()
			gc.c.Close(4004, "Authentication failed.")
			return
		}
		var sess *session
		for _, x := range s.sessions {
			if x.id == d.SessionID && !x.ended {
				sess = x
			}
		}
		if sess != nil && s.expireNext {
			s.expireNext = false
			sess.ended = true
			if s.sess == sess {
				s.sess = nil
			}
			sess = nil
		}
		s.resumes = append(s.resumes, Resume{Conn: gc.id, SessionID: d.SessionID, Seq: d.Seq, Accepted: sess != nil, At: time.Now()})
		s.changedLocked()
		if sess == nil {
			s.mu.Unlock()
			gc.write(map[string]any{"op": OpInvalidSession, "d": false})
			return
		}
		if d.Seq < 0 || d.Seq > int64(len(sess.log)) {
			s.violationLocked("conn %d: RESUME with seq %d, the session has %d events", gc.id, d.Seq, len(sess.log))
			s.mu.Unlock()
			gc.c.Close(4007, "Invalid seq.")
			return
		}
		if old := sess.conn; old != nil && old != gc {
			old.sess = nil
			go old.c.CloseNow()
		}
		sess.conn, gc.sess, gc.next = gc, sess, int(d.Seq)
		sess.log = append(sess.log, dispatch{T: "RESUMED", D: json.RawMessage(`{}`)})
		s.sess = sess
		s.mu.Unlock()
		gc.kick()
	case OpPresence, OpVoiceState, OpRequestMembers:
	default:
		s.mu.Lock()
		s.violationLocked("conn %d: opcode %d is not one a client sends", gc.id, f.Op)
		s.mu.Unlock()
	}
}

// closed detaches a connection that ended; a close by the client with 1000 or 1001 ends its
// session, as Discord does.
func (gc *gwConn) closed(err error) {
	s := gc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	code := websocket.CloseStatus(err)
	if sess := gc.sess; sess != nil && (code == websocket.StatusNormalClosure || code == websocket.StatusGoingAway) {
		sess.ended = true
		if s.sess == sess {
			s.sess = nil
		}
	}
}

func (gc *gwConn) gone() {
	s := gc.s
	close(gc.done)
	gc.c.CloseNow()
	s.mu.Lock()
	defer s.mu.Unlock()
	if gc.sess != nil && gc.sess.conn == gc {
		gc.sess.conn = nil
	}
	s.conns = slices.DeleteFunc(s.conns, func(c *gwConn) bool { return c == gc })
	s.changedLocked()
}

// dispatchLocked queues an event for the bot's session (or for the next one, when none is valid).
func (s *Server) dispatchLocked(t string, d any) {
	raw, _ := json.Marshal(d)
	if s.sess == nil || s.sess.ended {
		s.pending = append(s.pending, dispatch{T: t, D: raw})
	} else {
		s.sess.log = append(s.sess.log, dispatch{T: t, D: raw})
		if c := s.sess.conn; c != nil {
			c.kick()
		}
	}
	s.changedLocked()
}

// Dispatch queues an event of type t with data d (any JSON value) for the bot.
func (s *Server) Dispatch(t string, d any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatchLocked(t, d)
}

// guildJSONLocked is a GUILD_CREATE's data: the guild's channels and its active threads
// (unannounced ones included: Discord lists every active thread the bot can see).
func (s *Server) guildJSONLocked(id string) json.RawMessage {
	channels, threads := []any{}, []any{}
	for _, c := range s.channels {
		switch {
		case c.GuildID != id:
		case c.ParentID != "":
			threads = append(threads, channelJSON(c))
		default:
			channels = append(channels, channelJSON(c))
		}
	}
	raw, _ := json.Marshal(map[string]any{"id": id, "name": "guild", "unavailable": false, "channels": channels, "threads": threads,
		"members": []any{}, "roles": []any{}})
	return raw
}

func (s *Server) current() *gwConn {
	if s.sess == nil {
		return nil
	}
	return s.sess.conn
}

// RequestReconnect sends op 7 (reconnect) on the session's connection; it reports whether there
// was one.
func (s *Server) RequestReconnect() bool {
	s.mu.Lock()
	c := s.current()
	s.mu.Unlock()
	if c == nil {
		return false
	}
	c.write(map[string]any{"op": OpReconnect, "d": nil})
	return true
}

// InvalidSession sends op 9 on the session's connection with d = resumable. A session that is
// not resumable ends: the client must IDENTIFY again.
func (s *Server) InvalidSession(resumable bool) bool {
	s.mu.Lock()
	c := s.current()
	if c != nil && !resumable {
		s.sess.ended = true
		s.sess = nil
		c.sess = nil
	}
	s.mu.Unlock()
	if c == nil {
		return false
	}
	c.write(map[string]any{"op": OpInvalidSession, "d": resumable})
	return true
}

// ExpireSession makes the next RESUME of the current session be refused (op 9 d=false), as
// Discord refuses one that comes too late.
func (s *Server) ExpireSession() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireNext = true
}

// Zombie makes the session's connection stop acknowledging heartbeats and dispatching events;
// it stays open. It reports whether there was one.
func (s *Server) Zombie() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.current()
	if c == nil {
		return false
	}
	c.zombie = true
	s.changedLocked()
	return true
}

// DropConnections cuts every Gateway connection without a close frame.
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		c.c.CloseNow()
	}
}

// DropAfterNext cuts the session's connection right after the next event is written to it.
func (s *Server) DropAfterNext() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropNext = true
}

// Connected reports whether the bot's session has a connection that is not a zombie.
func (s *Server) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.current()
	return c != nil && !c.zombie
}

// Delivered reports whether every event of the session was written to its connection.
func (s *Server) Delivered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.current()
	return c != nil && !c.zombie && c.next >= len(s.sess.log) && len(s.pending) == 0
}

// Identifies returns the IDENTIFYs received.
func (s *Server) Identifies() []Identify {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.identifies)
}

// Resumes returns the RESUMEs received.
func (s *Server) Resumes() []Resume {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.resumes)
}

// Heartbeats returns the heartbeats received.
func (s *Server) Heartbeats() []Heartbeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.heartbeats)
}

// Conns returns how many Gateway connections are open, and how many were opened in all.
func (s *Server) Conns() (open, opened int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns), s.connsOpened
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
