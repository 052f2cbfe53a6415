package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// The connection to Yuanbao is a WebSocket the host owns (per plugin and profile); the plugin
// keeps what it knows about it in the kv store, so that any instance, a fresh one after a crash
// or a reload included, carries on with the same connection instead of binding a new one.
//
// Who writes what (one writer per key, so no update is lost):
//
//	conn      poll      connState: the connection, its ping, reconnect back-off, typing
//	recent    poll      the last messages' ids, chats and senders (recalls may name only an id)
//	reader    poll      until when a poll is reading the socket (unix ms)
//	resume    configure a reload or restart lifts a stop for good (unix ms)
//	token     both      the cached sign-token answer (any writer writes a valid token)
//	wait:<id> send→poll a send waiting for its answer; whoever reads the answer stores it there
//	done:<chat> send    the chat's answer was delivered (unix ms): its typing heartbeat ends
//	closed:<conn> send  how a connection a send saw closing, or closed, ended (the poll then acts on it)
//
// Only the poll reads the socket while it runs: a send writes its request and waits for the
// poll to store the answer under wait:<id>. A send reads the socket itself only when no poll is
// reading (a host without a poll loop, a poll in back-off), so frames are not taken by two
// readers at once except in that narrow handover.

// kv keys.
const (
	connKey      = "conn"
	recentKey    = "recent"
	readerKey    = "reader"
	resumeKey    = "resume"
	waitPrefix   = "wait:"
	donePrefix   = "done:"
	closedPrefix = "closed:"
)

// Timing.
const (
	pingEvery      = 30 * time.Second // an application-level ping (the WebSocket's own is not used)
	pongWithin     = 10 * time.Second
	missedPongs    = 2 // pongs missed in a row before the connection is replaced
	authWithin     = 10 * time.Second
	openWithin     = 10 * time.Second
	backoffFirst   = time.Second // reconnect back-off: 1 s, 2 s, 4 s … 60 s
	backoffMax     = 60 * time.Second
	stoppedRecheck = time.Minute // a profile with an invalid configuration is polled this often
	// haltRecheck is how often a profile stopped by a permanent close looks for the reload or
	// restart that lifts the stop (one kv read): the operator's reload takes effect at once.
	haltRecheck    = time.Second
	typingEvery    = 2 * time.Second
	typingAtMost   = 2 * time.Minute // a turn without an answer stops "typing" after this long
	maxPollWait    = 25 * time.Second
	minConnectTime = 9 * time.Second // a connect may take this long even when the poll's wait is shorter
	readerMargin   = 2 * time.Second
	maxRecent      = 256
)

// permanentCloseCodes end the connection for good: Yuanbao closed it because of the
// credentials, the bot's state or another instance, and reconnecting cannot help.
var permanentCloseCodes = []int{4012, 4013, 4014, 4018, 4019, 4021}

// connState is the poll's record of the connection (kv "conn").
type connState struct {
	Config     string             `json:"config"`               // the configuration digest it belongs to
	Conn       string             `json:"conn,omitempty"`       // the host's WebSocket id
	Bound      bool               `json:"bound,omitempty"`      // AUTH_BIND succeeded on Conn
	ConnectID  string             `json:"connect_id,omitempty"` // from AUTH_BIND
	BotID      string             `json:"bot_id,omitempty"`     // the bot's account
	PingAt     int64              `json:"ping_at,omitempty"`    // last ping sent (unix ms)
	PingID     string             `json:"ping_id,omitempty"`    // the ping awaiting its pong
	Missed     int                `json:"missed,omitempty"`     // pongs missed in a row
	Attempt    int                `json:"attempt,omitempty"`    // failed connects since the last pong
	RetryAt    int64              `json:"retry_at,omitempty"`   // no reconnect before (unix ms)
	LastError  string             `json:"last_error,omitempty"`
	Binds      int                `json:"binds,omitempty"` // AUTH_BINDs that succeeded, for the log
	Halt       *halt              `json:"halt,omitempty"`
	Acks       []head             `json:"acks,omitempty"` // PushAcks owed for events the last poll returned
	Held       []heldEvent        `json:"held,omitempty"` // events the host could not record yet
	Typing     map[string]*typing `json:"typing,omitempty"`
	BoundSince int64              `json:"bound_since,omitempty"`
}

// halt is a permanent close.
type halt struct {
	Code   int    `json:"code"`
	Reason string `json:"reason,omitempty"`
	At     int64  `json:"at"`
}

// typing is a chat whose answer is being prepared: RUNNING heartbeats until it is delivered.
type typing struct {
	Type    string `json:"type"` // abi.ChatDM or abi.ChatGroup
	ID      string `json:"id"`   // account or group code
	Started int64  `json:"started"`
	Last    int64  `json:"last,omitempty"`
}

// heldEvent is an event whose dispatch failed, kept until the host records it.
type heldEvent struct {
	Event abi.InboundEvent `json:"event"`
	Ack   *head            `json:"ack,omitempty"`
}

// recentMsg is a message seen recently, for recalls that name only an id or a sequence.
type recentMsg struct {
	ID       string `json:"id,omitempty"`
	Seq      uint64 `json:"seq,omitempty"`
	ChatType string `json:"type"`
	ChatID   string `json:"chat"`
	UserID   string `json:"user,omitempty"`
}

func chatKey(chatType, chatID string) string { return chatType + ":" + chatID }

// session is one call's view of the connection. The poll owns the state (it saves it); a send
// that reads the socket itself uses a session too but never saves the state.
type session struct {
	c     *sdk.Context
	cfg   *Config
	st    *connState
	owner bool   // the poll: st is saved, timers run
	saved []byte // st as last read or saved

	recent      []recentMsg
	recentDirty bool
	recentRead  bool

	returnMode bool               // the host has no dispatch: events are returned from poll
	returned   []abi.InboundEvent // events to return

	// unrecorded: a send read a push the host did not record (a host without hermes_dispatch,
	// or a failure to record). It stays unacknowledged, and the send replaces the connection
	// when it ends (replaceForPush), so that Yuanbao delivers it again after the next bind.
	unrecorded bool
}

func (s *session) now() time.Time {
	t, err := s.c.Now()
	if err != nil {
		return time.Now()
	}
	return t
}

func loadState(c *sdk.Context) (*connState, error) {
	raw, found, err := c.KVGet(connKey)
	if err != nil {
		return nil, err
	}
	st := &connState{}
	if found && json.Unmarshal(raw, st) != nil {
		c.Log(abi.LevelError, "ignoring a corrupt connection state", "value", clip(string(raw), 200))
		st = &connState{}
	}
	return st, nil
}

// save writes the state if it changed since it was last read or written: the poll saves after
// every step, so that sends see a new connection, and the chats being typed in, at once.
func (s *session) save() error {
	if !s.owner {
		return nil
	}
	raw, _ := json.Marshal(s.st)
	if !bytes.Equal(raw, s.saved) {
		if err := s.c.KVSet(connKey, raw); err != nil {
			return err
		}
		s.saved = raw
	}
	if s.recentDirty {
		raw, _ := json.Marshal(s.recent)
		if err := s.c.KVSet(recentKey, raw); err != nil {
			return err
		}
		s.recentDirty = false
	}
	return nil
}

func randomID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func randomUint32() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

// write sends one frame on the connection.
func (s *session) write(f *frame) error {
	if f.Head.SeqNo == 0 {
		f.Head.SeqNo = randomUint32()
	}
	return s.c.WSSend(s.st.Conn, abi.WSFrame{Binary: true, Data: f.marshal()})
}

func backoff(attempt int) time.Duration {
	d := backoffFirst
	for i := 1; i < attempt && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

// drop forgets the connection after a failure and schedules the next attempt.
func (s *session) drop(reason string) {
	st := s.st
	if st.Conn != "" {
		s.c.WSClose(st.Conn, 1000, "reconnecting")
	}
	st.Conn, st.Bound, st.ConnectID, st.PingID, st.Missed, st.Acks = "", false, "", "", 0, nil
	st.Attempt++
	wait := backoff(st.Attempt)
	st.RetryAt = s.now().Add(wait).UnixMilli()
	st.LastError = reason
	s.c.Log(abi.LevelWarn, "Yuanbao connection lost; reconnecting", "reason", reason,
		"attempt", strconv.Itoa(st.Attempt), "in", wait.String())
}

// stop ends the connection for good after a permanent close code.
func (s *session) stop(code int, reason string) {
	st := s.st
	st.Conn, st.Bound, st.ConnectID, st.PingID, st.Acks = "", false, "", "", nil
	st.Halt = &halt{Code: code, Reason: reason, At: s.now().UnixMilli()}
	// The credentials or the bot may be the cause: the connect after the operator's reload signs
	// a new token.
	forgetToken(s.c)
	s.c.Log(abi.LevelError, "Yuanbao closed the connection for good; not reconnecting until the plugin is reloaded or hermes-host restarts",
		"close_code", strconv.Itoa(code), "reason", reason)
}

// closed handles the peer's close of the connection.
func (s *session) closed(code int, reason string) {
	if slices.Contains(permanentCloseCodes, code) {
		s.stop(code, reason)
		return
	}
	s.drop(fmt.Sprintf("closed by Yuanbao (code %d %s)", code, reason))
}

// connect signs a token, opens the WebSocket and binds it (AUTH_BIND), within the time left
// before deadline. A failure schedules the next attempt with back-off.
func (s *session) connect(deadline time.Time) {
	st := s.st
	if st.Conn != "" { // left half-open (a crash during a connect): never bound, so replace it
		s.c.WSClose(st.Conn, 1000, "unbound")
		st.Conn = ""
	}
	// The cached token, until it is about to expire (getToken).
	tok, err := getToken(s.c, s.cfg)
	if err != nil {
		s.drop(scrubError(s.cfg, err))
		return
	}
	botID := s.cfg.BotID
	if botID == "" {
		botID = tok.BotID
	}
	left := deadline.Sub(s.now())
	id, err := s.c.WSOpen(&abi.WSOpenRequest{URL: s.cfg.WSURL, TimeoutMs: min(openWithin, max(left, time.Second)).Milliseconds()})
	if err != nil {
		s.drop("WebSocket: " + scrubError(s.cfg, err))
		return
	}
	st.Conn, st.Bound, st.BotID = id, false, botID
	if err := s.save(); err != nil { // from here a crash leaves a connection to close, not to leak
		s.drop("saving the connection: " + err.Error())
		return
	}
	source := tok.Source
	if source == "" {
		source = "bot"
	}
	bind := authBind{BizID: "ybBot", UID: botID, Source: source, Token: tok.Token, AppVersion: Version,
		OS: "hermes-host", InstanceID: instanceID, BotVersion: Version, EnvName: s.cfg.RouteEnv}
	msgID := randomID("auth_")
	if err := s.write(&frame{Head: head{CmdType: cmdRequest, Cmd: cmdAuthBind, MsgID: msgID, Module: moduleConn}, Data: bind.marshal()}); err != nil {
		s.drop("AUTH_BIND: " + err.Error())
		return
	}
	until := s.now().Add(authWithin)
	if deadline.Before(until) {
		until = deadline
	}
	for {
		now := s.now()
		if !now.Before(until) {
			s.drop("no answer to AUTH_BIND within " + authWithin.String())
			return
		}
		r, err := s.c.WSRecv(id, until.Sub(now), 16)
		if err != nil {
			s.drop("AUTH_BIND: " + err.Error())
			return
		}
		answered := false
		for _, f := range r.Frames {
			fr, err := parseFrame(f.Data)
			if err != nil {
				continue
			}
			if answered || fr.Head.CmdType != cmdResponse || fr.Head.Cmd != cmdAuthBind {
				// Pushes may follow the answer in the same read (Yuanbao delivers what waited
				// for this bind at once): they are handled like any other.
				if st.Bound || !answered {
					s.handle(fr)
				}
				continue
			}
			answered = true
			rep, err := parseReply(fr.Data)
			switch {
			case err != nil:
				s.drop("AUTH_BIND answer: " + err.Error())
			case rep.Code != 0 || fr.Head.Status != 0:
				// The token may be what Yuanbao refused (revoked, expired early): sign anew.
				forgetToken(s.c)
				s.drop(fmt.Sprintf("AUTH_BIND refused: code %d status %d: %s", rep.Code, fr.Head.Status, rep.Message))
			case rep.ConnectID == "":
				s.drop("AUTH_BIND answered without a connect_id")
			default:
				st.Bound, st.ConnectID, st.PingAt, st.PingID, st.Missed = true, rep.ConnectID, s.now().UnixMilli(), "", 0
				st.RetryAt, st.LastError, st.BoundSince = 0, "", st.PingAt
				st.Binds++
				s.c.Log(abi.LevelInfo, "connected to Yuanbao", "bot_id", botID, "connect_id", rep.ConnectID,
					"binds", strconv.Itoa(st.Binds))
			}
		}
		if answered {
			if r.Closed && st.Bound {
				st.Conn = ""
				s.closed(r.CloseCode, r.CloseReason)
			}
			return
		}
		if r.Closed {
			s.closed(r.CloseCode, r.CloseReason)
			return
		}
	}
}

// scrubError removes the secret from an error text (egress errors quote URLs, never bodies, but
// be sure).
func scrubError(cfg *Config, err error) string {
	msg := err.Error()
	if cfg.AppSecret != "" {
		msg = strings.ReplaceAll(msg, cfg.AppSecret, "<app_secret>")
	}
	return msg
}

// handle acts on one frame read from the socket.
func (s *session) handle(fr *frame) {
	h := fr.Head
	switch h.CmdType {
	case cmdResponse:
		switch h.Cmd {
		case cmdPing:
			if s.owner && s.st.PingID != "" && (h.MsgID == s.st.PingID || h.MsgID == "") {
				s.st.PingID, s.st.Missed, s.st.Attempt = "", 0, 0
			}
		case cmdSendC2C, cmdSendGroup:
			s.answer(fr)
		}
	case cmdPush:
		s.push(fr)
	}
}

// answer stores a send's answer where the waiting send looks for it (only if it still waits).
func (s *session) answer(fr *frame) {
	key := waitPrefix + fr.Head.MsgID
	if _, found, err := s.c.KVGet(key); err != nil || !found {
		return
	}
	rep, _ := parseReply(fr.Data)
	raw, _ := json.Marshal(sendAnswer{Status: fr.Head.Status, Code: rep.Code, Message: rep.Message})
	if err := s.c.KVSet(key, raw); err != nil {
		s.c.Log(abi.LevelWarn, "could not store a send's answer", "msg_id", fr.Head.MsgID, "error", err.Error())
	}
}

// sendAnswer is a send's answer, as stored under wait:<msg_id>.
type sendAnswer struct {
	Status  int32  `json:"status"`
	Code    int32  `json:"code"`
	Message string `json:"message,omitempty"`
}

// push decodes and delivers a push, then acknowledges it if Yuanbao asked for it.
func (s *session) push(fr *frame) {
	var ack *head
	if fr.Head.NeedAck {
		ack = &head{CmdType: cmdPushAck, Cmd: fr.Head.Cmd, MsgID: fr.Head.MsgID, Module: fr.Head.Module}
	}
	if len(fr.Data) == 0 {
		s.acknowledge(ack)
		return
	}
	p, err := decodePush(fr.Data)
	if err != nil {
		s.c.Log(abi.LevelWarn, "skipping an unreadable push", "cmd", fr.Head.Cmd, "msg_id", fr.Head.MsgID, "error", err.Error())
		s.acknowledge(ack) // it will not read better next time
		return
	}
	m := mapPush(p, mapOptions{BotID: s.botID()})
	var events []abi.InboundEvent
	switch {
	case m.Event != nil:
		events = append(events, *m.Event)
		s.remember(m.Event, m.Seq)
	case len(m.Recalls) > 0:
		for _, r := range m.Recalls {
			if ev, ok := s.recallEvent(r); ok {
				events = append(events, ev)
			} else {
				s.c.Log(abi.LevelWarn, "a recall names a message of unknown chat; ignored", "msg_id", r.MsgID,
					"msg_seq", strconv.FormatUint(r.Seq, 10))
			}
		}
	default:
		s.c.Log(abi.LevelDebug, "skipping push", "msg_id", p.MsgID, "reason", m.Skip)
	}
	s.deliver(events, ack)
}

func (s *session) botID() string {
	if s.cfg.BotID != "" {
		return s.cfg.BotID
	}
	return s.st.BotID
}

// deliver hands events to the host, then sends the push's acknowledgement: hermes_dispatch
// records them durably (and deduplicates them by id) before it answers. Without a dispatch
// function (a host without a turn engine) the events are returned from poll and the
// acknowledgement waits for the next poll, which the host makes only after recording them.
// Events the host cannot record now are held in the state and dispatched again by the next poll.
func (s *session) deliver(events []abi.InboundEvent, ack *head) {
	for i, ev := range events {
		if s.returnMode {
			s.handOver(events[i:], ack)
			return
		}
		_, err := s.c.Dispatch(ev)
		switch {
		case err == nil:
			s.startTyping(ev)
		case abi.CodeOf(err) == abi.CodeUnavailable && s.owner:
			s.returnMode = true
			s.handOver(events[i:], ack)
			return
		default:
			if !s.owner {
				s.c.Log(abi.LevelWarn, "the host did not record a push read by a send; the connection is replaced after the send so that Yuanbao delivers it again",
					"id", ev.ID, "error", err.Error())
				s.unrecorded = true
				return
			}
			s.c.Log(abi.LevelWarn, "the host could not record an event; holding it", "id", ev.ID, "error", err.Error())
			for j, rest := range events[i:] {
				h := heldEvent{Event: rest}
				if j == len(events[i:])-1 {
					h.Ack = ack
				}
				s.st.Held = append(s.st.Held, h)
			}
			return
		}
	}
	s.acknowledge(ack)
}

// handOver returns events from poll instead of dispatching them; their acknowledgement is owed
// until the next poll.
func (s *session) handOver(events []abi.InboundEvent, ack *head) {
	s.returned = append(s.returned, events...)
	for _, ev := range events {
		s.startTyping(ev)
	}
	s.owe(ack)
}

func (s *session) owe(ack *head) {
	if ack != nil {
		s.st.Acks = append(s.st.Acks, *ack)
	}
}

func (s *session) acknowledge(ack *head) {
	if ack == nil || s.st.Conn == "" {
		return
	}
	if err := s.write(&frame{Head: *ack}); err != nil {
		s.c.Log(abi.LevelWarn, "PushAck not sent", "msg_id", ack.MsgID, "error", err.Error())
	}
}

// flushOwed dispatches held events and sends the acknowledgements the last poll owed. It
// reports false when the host still cannot record events.
func (s *session) flushOwed() bool {
	for len(s.st.Held) > 0 {
		h := s.st.Held[0]
		if _, err := s.c.Dispatch(h.Event); err != nil && abi.CodeOf(err) != abi.CodeUnavailable {
			s.c.Log(abi.LevelWarn, "the host still cannot record an event", "id", h.Event.ID, "error", err.Error())
			return false
		}
		s.st.Held = s.st.Held[1:]
		s.acknowledge(h.Ack)
	}
	for _, a := range s.st.Acks {
		s.acknowledge(&a)
	}
	s.st.Acks = nil
	return true
}

// --- recent messages, for recalls ---

func (s *session) loadRecent() {
	if s.recentRead {
		return
	}
	s.recentRead = true
	raw, found, err := s.c.KVGet(recentKey)
	if err == nil && found {
		json.Unmarshal(raw, &s.recent)
	}
}

func (s *session) remember(ev *abi.InboundEvent, seq uint64) {
	if !s.owner {
		return
	}
	s.loadRecent()
	s.recent = append(s.recent, recentMsg{ID: ev.Source.MessageID, Seq: seq, ChatType: ev.Source.ChatType,
		ChatID: ev.Source.ChatID, UserID: ev.Source.UserID})
	if len(s.recent) > maxRecent {
		s.recent = s.recent[len(s.recent)-maxRecent:]
	}
	s.recentDirty = true
}

// recallEvent builds the redact event of a recall, completing its chat and sender (and the
// message id of a recall that names only a sequence number) from recent messages.
func (s *session) recallEvent(r recallTarget) (abi.InboundEvent, bool) {
	s.loadRecent()
	for i := len(s.recent) - 1; i >= 0; i-- {
		m := s.recent[i]
		if (r.MsgID != "" && m.ID == r.MsgID) || (r.MsgID == "" && r.Seq != 0 && m.Seq == r.Seq && (r.ChatID == "" || m.ChatID == r.ChatID)) {
			r.ChatType, r.ChatID, r.UserID = m.ChatType, m.ChatID, m.UserID
			if r.MsgID == "" {
				r.MsgID = m.ID
			}
			break
		}
	}
	if r.MsgID == "" && r.Seq != 0 {
		r.MsgID = strconv.FormatUint(r.Seq, 10)
	}
	if r.ChatID == "" || r.MsgID == "" {
		return abi.InboundEvent{}, false
	}
	return abi.InboundEvent{ID: "recall:" + r.MsgID, Kind: abi.EventRedact,
		Source: abi.Source{ChatType: r.ChatType, ChatID: r.ChatID, UserID: r.UserID, MessageID: r.MsgID}}, true
}

// --- typing heartbeats ---

// startTyping begins RUNNING heartbeats for the chat of a message the host will answer.
func (s *session) startTyping(ev abi.InboundEvent) {
	if !s.owner || (ev.Kind != abi.EventMessage && ev.Kind != "") {
		return
	}
	src := ev.Source
	if s.st.Typing == nil {
		s.st.Typing = map[string]*typing{}
	}
	s.st.Typing[chatKey(src.ChatType, src.ChatID)] = &typing{Type: src.ChatType, ID: src.ChatID, Started: s.now().UnixMilli()}
}

// heartbeat sends a RUNNING or FINISH heartbeat into a chat, without waiting for its answer.
func (s *session) heartbeat(chatType, chatID string, hb uint32) error {
	f := &frame{Head: head{CmdType: cmdRequest, Module: moduleBot}}
	if chatType == abi.ChatGroup {
		f.Head.Cmd, f.Head.MsgID = cmdGroupHB, randomID("hb_grp_")
		f.Data = groupHeartbeat(s.botID(), chatID, s.now().UnixMilli(), hb)
	} else {
		f.Head.Cmd, f.Head.MsgID = cmdPrivateHB, randomID("hb_priv_")
		f.Data = privateHeartbeat(s.botID(), chatID, hb)
	}
	return s.write(f)
}

// --- timers ---

// timers sends what is due: the ping (and notices a missed pong), and typing heartbeats.
func (s *session) timers() {
	st := s.st
	if !st.Bound {
		return
	}
	now := s.now().UnixMilli()
	if st.PingID != "" && now-st.PingAt >= pongWithin.Milliseconds() {
		st.PingID = ""
		st.Missed++
		s.c.Log(abi.LevelWarn, "Yuanbao did not answer a ping", "missed", strconv.Itoa(st.Missed))
		if st.Missed >= missedPongs {
			s.drop(fmt.Sprintf("%d pings in a row unanswered", st.Missed))
			return
		}
	}
	if now-st.PingAt >= pingEvery.Milliseconds() {
		id := randomID("ping_")
		if err := s.write(&frame{Head: head{CmdType: cmdRequest, Cmd: cmdPing, MsgID: id, Module: moduleConn}}); err != nil {
			s.drop("ping: " + err.Error())
			return
		}
		st.PingAt, st.PingID = now, id
	}
	for key, t := range st.Typing {
		done, found, _ := s.c.KVGet(donePrefix + key)
		if found {
			if at, err := strconv.ParseInt(string(done), 10, 64); err == nil && at >= t.Started {
				delete(st.Typing, key) // the send that delivered the answer sent FINISH
				s.c.KVDelete(donePrefix + key)
				continue
			}
		}
		if now-t.Started >= typingAtMost.Milliseconds() {
			s.heartbeat(t.Type, t.ID, heartbeatDone)
			delete(st.Typing, key)
			continue
		}
		if now-t.Last >= typingEvery.Milliseconds() {
			if err := s.heartbeat(t.Type, t.ID, heartbeatRun); err == nil {
				t.Last = now
			}
		}
	}
}

// nextTimer is when timers has something to do next.
func (s *session) nextTimer() time.Time {
	st := s.st
	next := time.UnixMilli(st.PingAt).Add(pingEvery)
	if st.PingID != "" {
		next = time.UnixMilli(st.PingAt).Add(pongWithin)
	}
	for _, t := range st.Typing {
		if at := time.UnixMilli(t.Last).Add(typingEvery); at.Before(next) {
			next = at
		}
	}
	return next
}
