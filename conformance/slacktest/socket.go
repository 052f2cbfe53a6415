package slacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// socketState is the Socket Mode side of the server. Its fields are guarded by Server.mu.
type socketState struct {
	tickets map[string]bool // issued by apps.connections.open, not yet used
	conns   []*sockConn     // open connections
	opened  int
	frames  []SocketFrame
	acks    []SocketAck
	lose    int  // acknowledgements still to ignore (LoseAcks)
	running bool // the delivery loop runs
}

type sockConn struct {
	id      int
	c       *websocket.Conn
	writeMu sync.Mutex
	done    chan struct{} // closed when the reader stops
}

// SocketFrame is a frame the fake sent on a Socket Mode connection.
type SocketFrame struct {
	Conn         int
	Type         string // hello, events_api, disconnect
	EnvelopeID   string
	EventID      string
	RetryAttempt int
	RetryReason  string
	Time         time.Time
	Failed       bool // the write failed (the connection was closing)
}

// SocketAck is an acknowledgement the app sent on a Socket Mode connection.
type SocketAck struct {
	Conn       int
	EnvelopeID string
	EventID    string // "" for an envelope id the fake never sent
	Payload    json.RawMessage
	Time       time.Time
	Lost       bool // dropped by LoseAcks: the fake acts as if it never arrived
}

// LoseAcks makes the fake ignore the next n acknowledgements, as if they were lost with their
// connection: the events are sent again, in new envelopes, although the app handled them.
func (s *Server) LoseAcks(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sock.lose += n
}

// SetSocketMode turns Socket Mode on or off. While it is on, events go to the app's Socket Mode
// connections (opened with apps.connections.open) instead of the Request URL; with no
// connection open they wait. An events_api frame not acknowledged (by its envelope_id) within the
// ack timeout, or sent on a connection that closes first, is sent again with retry_attempt + 1,
// up to the number of retries of the retry schedule.
func (s *Server) SetSocketMode(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.socketMode = on
	if on && !s.sock.running {
		s.sock.running = true
		s.workers.Add(1)
		go s.socketLoop()
	}
	if !on {
		s.routeLocked()
	}
	s.changedLocked()
}

func (s *Server) issueTicket() string {
	var b [12]byte
	rand.Read(b[:])
	t := hex.EncodeToString(b[:])
	s.mu.Lock()
	s.sock.tickets[t] = true
	s.mu.Unlock()
	return t
}

// serveSocket accepts a Socket Mode connection at the URL apps.connections.open handed out
// (each URL works once) and greets it with hello.
func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	valid := s.sock.tickets[ticket]
	delete(s.sock.tickets, ticket)
	s.mu.Unlock()
	if !valid {
		http.Error(w, "invalid or used ticket", http.StatusUnauthorized)
		return
	}
	// Slack clients send Origin: https://api.slack.com; the origin is not checked.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	c.SetReadLimit(1 << 20)
	s.mu.Lock()
	s.sock.opened++
	sc := &sockConn{id: s.sock.opened, c: c, done: make(chan struct{})}
	s.sock.conns = append(s.sock.conns, sc)
	n := len(s.sock.conns)
	s.mu.Unlock()
	hello := map[string]any{"type": "hello", "num_connections": n,
		"debug_info":      map[string]any{"host": "applink-hermes-test", "build_number": 1, "approximate_connection_time": 18060},
		"connection_info": map[string]any{"app_id": DefaultAppID}}
	s.send(sc, SocketFrame{Type: "hello"}, hello)
	s.workers.Add(1)
	go s.ping(sc)
	s.readAcks(sc) // the handler's goroutine reads until the connection ends
}

// readAcks reads the app's frames on sc (acknowledgements) until it closes.
func (s *Server) readAcks(sc *sockConn) {
	defer func() {
		close(sc.done)
		sc.c.CloseNow()
		s.mu.Lock()
		for i, x := range s.sock.conns {
			if x == sc {
				s.sock.conns = append(s.sock.conns[:i:i], s.sock.conns[i+1:]...)
				break
			}
		}
		s.changedLocked()
		s.mu.Unlock()
	}()
	for {
		_, data, err := sc.c.Read(s.ctx)
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		s.mu.Lock()
		a := SocketAck{Conn: sc.id, EnvelopeID: ack.EnvelopeID, Payload: ack.Payload, Time: s.cfg.clock.Now()}
		a.Lost = s.sock.lose > 0
		if a.Lost {
			s.sock.lose--
		}
		for _, p := range s.envelopes {
			if contains(p.envelopeIDs, ack.EnvelopeID) {
				a.EventID = p.id
				p.acked = p.acked || !a.Lost // a late ack of an earlier envelope counts too
				break
			}
		}
		s.sock.acks = append(s.sock.acks, a)
		s.changedLocked()
		s.mu.Unlock()
	}
}

// ping keeps sc alive as Slack does (clients such as slack-go time out without pings).
func (s *Server) ping(sc *sockConn) {
	defer s.workers.Done()
	t := time.NewTicker(s.cfg.socketPing)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			sc.c.Ping(ctx)
			cancel()
		case <-sc.done:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// send records one frame and writes it to sc (recorded first: the app may answer before Write
// returns). A frame that could not be written is marked Failed.
func (s *Server) send(sc *sockConn, f SocketFrame, v any) error {
	s.mu.Lock()
	f.Conn, f.Time = sc.id, s.cfg.clock.Now()
	i := len(s.sock.frames)
	s.sock.frames = append(s.sock.frames, f)
	s.changedLocked()
	s.mu.Unlock()
	sc.writeMu.Lock()
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	err := sc.c.Write(ctx, websocket.MessageText, marshal(v))
	cancel()
	sc.writeMu.Unlock()
	if err != nil {
		s.mu.Lock()
		s.sock.frames[i].Failed = true
		s.changedLocked()
		s.mu.Unlock()
	}
	return err
}

// socketLoop hands queued events to open connections and resends those not acknowledged in
// time, while Socket Mode is on.
func (s *Server) socketLoop() {
	defer s.workers.Done()
	type out struct {
		sc    *sockConn
		f     SocketFrame
		frame map[string]any
	}
	for {
		s.mu.Lock()
		if !s.socketMode || s.ctx.Err() != nil {
			s.sock.running = false
			s.mu.Unlock()
			return
		}
		now := time.Now()
		wake := time.Hour
		var sends []out
		live := map[*sockConn]bool{}
		for _, c := range s.sock.conns {
			live[c] = true
		}
		keep := s.queue[:0]
		next := 0
		for _, p := range s.queue {
			if p.acked || p.gaveUp {
				continue
			}
			keep = append(keep, p)
			if p.sentOn != nil {
				waited := now.Sub(p.sentAt)
				if live[p.sentOn] && waited < s.cfg.ackTimeout {
					wake = min(wake, s.cfg.ackTimeout-waited)
					continue
				}
				if p.attempt >= len(s.cfg.retries) {
					p.gaveUp = true
					continue
				}
				p.attempt++
				p.reason = "http_timeout" // as Slack labels a Socket Mode retry, whatever the cause
				p.envelopeID = ""         // a retry comes in a new envelope
				p.sentOn = nil
			}
			if len(s.sock.conns) == 0 {
				continue
			}
			sc := s.sock.conns[next%len(s.sock.conns)]
			next++
			if p.envelopeID == "" {
				p.envelopeID = newEnvelopeID()
				p.envelopeIDs = append(p.envelopeIDs, p.envelopeID)
			}
			p.started, p.sentOn, p.sentAt = true, sc, now
			wake = min(wake, s.cfg.ackTimeout)
			o := out{sc: sc,
				f: SocketFrame{Type: "events_api", EnvelopeID: p.envelopeID, EventID: p.id, RetryAttempt: p.attempt, RetryReason: p.reason},
				frame: map[string]any{"envelope_id": p.envelopeID, "payload": json.RawMessage(p.body), "type": "events_api",
					"accepts_response_payload": false, "retry_attempt": p.attempt, "retry_reason": p.reason}}
			if p.frameType == "interactive" {
				o.f.Type = p.frameType
				o.frame = map[string]any{"envelope_id": p.envelopeID, "payload": json.RawMessage(p.body), "type": p.frameType,
					"accepts_response_payload": true}
			}
			sends = append(sends, o)
		}
		s.queue = keep
		ch := s.changed.C()
		s.mu.Unlock()
		for _, o := range sends {
			s.send(o.sc, o.f, o.frame) // a failed write shows as a closed connection: resent there
		}
		t := time.NewTimer(wake)
		select {
		case <-ch:
		case <-t.C:
		case <-s.ctx.Done():
		}
		t.Stop()
	}
}

func newEnvelopeID() string {
	var b [16]byte
	rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return fmt.Sprintf("%s-%s-%s-%s-%s", h[:8], h[8:12], h[12:16], h[16:20], h[20:])
}

// Disconnect asks every open connection to reconnect, as Slack does before it recycles a
// connection: a "disconnect" frame with reason ("warning", "refresh_requested"...), then, after
// grace, the connection is closed.
func (s *Server) Disconnect(reason string, grace time.Duration) {
	s.mu.Lock()
	conns := append([]*sockConn(nil), s.sock.conns...)
	s.mu.Unlock()
	for _, sc := range conns {
		s.send(sc, SocketFrame{Type: "disconnect"}, map[string]any{"type": "disconnect", "reason": reason,
			"debug_info": map[string]any{"host": "applink-hermes-test"}})
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		s.sleep(s.ctx, grace)
		for _, sc := range conns {
			sc.c.Close(websocket.StatusNormalClosure, "")
		}
	}()
}

// DropSockets cuts every open connection without a close handshake (a network failure);
// events sent on them and not yet acknowledged are sent again on the next connection.
func (s *Server) DropSockets() {
	s.mu.Lock()
	conns := append([]*sockConn(nil), s.sock.conns...)
	s.mu.Unlock()
	for _, sc := range conns {
		sc.c.CloseNow()
		<-sc.done
	}
}

func (s *Server) closeSockets() {
	s.mu.Lock()
	conns := append([]*sockConn(nil), s.sock.conns...)
	s.mu.Unlock()
	for _, sc := range conns {
		sc.c.CloseNow()
	}
}

// SocketConns returns how many Socket Mode connections are open, and how many were opened.
func (s *Server) SocketConns() (open, opened int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sock.conns), s.sock.opened
}

// SocketFrames returns the frames sent on Socket Mode connections, oldest first.
func (s *Server) SocketFrames() []SocketFrame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SocketFrame(nil), s.sock.frames...)
}

// SocketAcks returns the acknowledgements received, oldest first.
func (s *Server) SocketAcks() []SocketAck {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SocketAck(nil), s.sock.acks...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
