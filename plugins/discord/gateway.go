package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// The Gateway connection is a WebSocket the host owns (per plugin and profile); the plugin keeps
// what it knows of it in the kv store, so that any instance, a fresh one after a crash or a
// reload included, carries on with the same connection and the same session.
//
// Only poll opens, reads and writes the Gateway (IDENTIFY, RESUME, heartbeats): Discord takes no
// message posts over it, so nothing outside send can post into a chat. Sequence discipline: the
// session's sequence (seq) is advanced only after the host recorded the event it numbers
// (hermes_dispatch answered, or the events poll returned were recorded before the next poll), so
// a RESUME after any drop or crash replays exactly what the host may not have, and the host's
// deduplication by id (msg:<message id>) absorbs what it already had.
//
// kv keys:
//
//	gw        poll       gwState
//	resume    configure  a reload or restart lifts a stop for good (unix ms)
//	me        configure  the bot's user id (GET /users/@me)
//	ch:<n>    poll       a channel's type and parent (threads), in fixed slots
//	follow:<n> poll      threads the bot was mentioned in, in fixed slots
//	rl        send       route buckets that are exhausted, and the global limit

const (
	gwKey       = "gw"
	resumeKey   = "resume"
	meKey       = "me"
	cacheSlots  = 4096
	maxPollWait = 25 * time.Second
	openWithin  = 10 * time.Second
	helloWithin = 10 * time.Second
	// backoff between failed connects: 1 s, 2 s, 4 s … 60 s.
	backoffFirst = time.Second
	backoffMax   = 60 * time.Second
	// invalidWait is the pause Discord asks for before a new IDENTIFY after op 9.
	invalidWait    = time.Second
	stoppedRecheck = time.Minute
	haltRecheck    = time.Second
	// closeResumable is the close code the plugin closes with: anything but 1000 and 1001,
	// which end the session on Discord's side (a RESUME would then be refused).
	closeResumable = 4000
)

// Intents: guilds (threads, channels), guild and direct messages, and their content
// (a privileged intent the bot's owner enables in the Developer Portal).
const (
	intentGuilds         = 1 << 0
	intentGuildMessages  = 1 << 9
	intentDirectMessages = 1 << 12
	intentMessageContent = 1 << 15
	Intents              = intentGuilds | intentGuildMessages | intentDirectMessages | intentMessageContent
)

// Gateway opcodes.
const (
	opDispatch       = 0
	opHeartbeat      = 1
	opIdentify       = 2
	opResume         = 6
	opReconnect      = 7
	opInvalidSession = 9
	opHello          = 10
	opHeartbeatACK   = 11
)

// permanentCloseCodes end the connection for good: the token, the shard or the intents are
// wrong, and reconnecting cannot help (4014: the Message Content intent is not enabled).
var permanentCloseCodes = map[int]string{4004: "authentication failed (the bot token was refused)",
	4010: "invalid shard", 4011: "sharding required", 4012: "invalid API version",
	4013: "invalid intents", 4014: "disallowed intents (enable the Message Content intent in the Developer Portal)"}

// freshCloseCodes end the session: the next connection IDENTIFYs.
var freshCloseCodes = []int{4007, 4009}

// gwState is poll's record of the Gateway (kv "gw").
type gwState struct {
	Config     string `json:"config"`
	Conn       string `json:"conn,omitempty"`
	Ready      bool   `json:"ready,omitempty"` // READY or RESUMED seen on Conn
	SessionID  string `json:"session_id,omitempty"`
	ResumeURL  string `json:"resume_url,omitempty"`
	Seq        int64  `json:"seq,omitempty"`  // the last sequence whose event the host recorded
	Owed       int64  `json:"owed,omitempty"` // the sequence of events the last poll returned
	IntervalMs int64  `json:"interval_ms,omitempty"`
	BeatAt     int64  `json:"beat_at,omitempty"` // last heartbeat sent (unix ms)
	AwaitAck   bool   `json:"await_ack,omitempty"`
	BotID      string `json:"bot_id,omitempty"`
	BotName    string `json:"bot_name,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	RetryAt    int64  `json:"retry_at,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	Halt       *halt  `json:"halt,omitempty"`
	Identifies int    `json:"identifies,omitempty"`
	Resumes    int    `json:"resumes,omitempty"`
}

// halt is a permanent close.
type halt struct {
	Code   int    `json:"code"`
	Reason string `json:"reason,omitempty"`
	At     int64  `json:"at"`
}

// gwFrame is a Gateway payload.
type gwFrame struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
	S  *int64          `json:"s,omitempty"`
	T  string          `json:"t,omitempty"`
}

// conn is one poll's view of the Gateway.
type conn struct {
	c     *sdk.Context
	cfg   *Config
	st    *gwState
	saved []byte

	returnMode bool // the host has no dispatch: events are returned from poll
	returned   []abi.InboundEvent
}

func (g *conn) now() time.Time {
	if t, err := g.c.Now(); err == nil {
		return t
	}
	return time.Now()
}

func loadState(c *sdk.Context) (*gwState, []byte, error) {
	raw, found, err := c.KVGet(gwKey)
	if err != nil {
		return nil, nil, err
	}
	st := &gwState{}
	if found && json.Unmarshal(raw, st) != nil {
		c.Log(abi.LevelError, "ignoring a corrupt Gateway state")
		st = &gwState{}
	}
	return st, raw, nil
}

// save writes the state if it changed since it was last read or written.
func (g *conn) save() error {
	raw, _ := json.Marshal(g.st)
	if bytes.Equal(raw, g.saved) {
		return nil
	}
	if err := g.c.KVSet(gwKey, raw); err != nil {
		return err
	}
	g.saved = raw
	return nil
}

// poll keeps the profile's Gateway connection and reads it for up to the requested wait.
func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return &abi.PollResult{BackoffMs: stoppedRecheck.Milliseconds(),
			Status: &abi.ProfileStatus{State: abi.StatusStopped, Message: "invalid configuration: " + strings.Join(p, "; ")}}, nil
	}
	st, raw, err := loadState(c)
	if err != nil {
		return nil, err
	}
	g := &conn{c: c, cfg: cfg, st: st, saved: raw}
	if st.Config != cfg.digest() {
		if st.Conn != "" {
			c.WSClose(st.Conn, 1000, "configuration changed")
		}
		*st = gwState{Config: cfg.digest()}
		if raw, found, _ := c.KVGet(meKey); found {
			st.BotID = string(raw)
		}
	}
	// The events the last poll returned are recorded now (the host polls again only then).
	if st.Owed > st.Seq {
		st.Seq = st.Owed
	}
	st.Owed = 0
	if st.Halt != nil && resumed(c, st.Halt) {
		c.Log(abi.LevelInfo, "the plugin was reloaded: connecting to Discord again after the permanent close",
			"close_code", strconv.Itoa(st.Halt.Code))
		st.Halt, st.Attempt, st.RetryAt = nil, 0, 0
	}
	res := &abi.PollResult{}
	wait := min(max(time.Duration(req.WaitMs)*time.Millisecond, 0), maxPollWait)
	if st.Halt == nil {
		g.run(g.now().Add(wait), res)
	} else {
		res.BackoffMs = haltRecheck.Milliseconds()
	}
	if err := g.save(); err != nil {
		return nil, err
	}
	res.Events = g.returned
	res.Status = g.status()
	return res, nil
}

// resumed reports whether a reload or restart (configure) happened after the permanent close.
func resumed(c *sdk.Context, h *halt) bool {
	raw, found, err := c.KVGet(resumeKey)
	if err != nil || !found {
		return false
	}
	at, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil && at > h.At
}

// run is poll's loop until deadline, or until it has events to return.
func (g *conn) run(deadline time.Time, res *abi.PollResult) {
	c, st := g.c, g.st
	for len(g.returned) == 0 && st.Halt == nil {
		if err := g.save(); err != nil {
			c.Log(abi.LevelError, "could not save the Gateway state", "error", err.Error())
		}
		now := g.now()
		if !now.Before(deadline) {
			return
		}
		if st.Conn == "" {
			if retry := time.UnixMilli(st.RetryAt); now.Before(retry) {
				res.BackoffMs = retry.Sub(now).Milliseconds()
				return
			}
			g.connect()
			continue
		}
		interval := time.Duration(st.IntervalMs) * time.Millisecond
		next := deadline
		if interval > 0 {
			due := time.UnixMilli(st.BeatAt).Add(interval)
			if !now.Before(due) {
				if st.AwaitAck {
					// A zombied connection: Discord stopped answering. Close it and resume.
					g.drop("no heartbeat ACK within "+interval.String()+" (a zombied connection)", false)
					continue
				}
				g.heartbeat()
				continue
			}
			if due.Before(next) {
				next = due
			}
		}
		r, err := c.WSRecv(st.Conn, max(next.Sub(now), time.Millisecond), 32)
		if err != nil {
			st.Conn = "" // the host no longer knows it (it restarted, or the peer closed it)
			g.drop("the connection is gone: "+err.Error(), true)
			continue
		}
		for _, f := range r.Frames {
			if !g.handle(f.Data) {
				break
			}
		}
		if r.Closed && st.Conn != "" {
			st.Conn = "" // the host has forgotten it
			g.closed(r.CloseCode, r.CloseReason)
		}
	}
}

func backoff(attempt int) time.Duration {
	d := backoffFirst
	for i := 1; i < attempt && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

// drop closes the connection (keeping the session, so the next connection RESUMEs) and
// schedules the next attempt: at once, or after the back-off when failing.
func (g *conn) drop(reason string, failing bool) {
	st := g.st
	if st.Conn != "" {
		g.c.WSClose(st.Conn, closeResumable, "reconnecting")
	}
	st.Conn, st.Ready, st.AwaitAck = "", false, false
	st.LastError = reason
	st.RetryAt = g.now().UnixMilli()
	if failing {
		st.Attempt++
		st.RetryAt = g.now().Add(backoff(st.Attempt)).UnixMilli()
	}
	g.c.Log(abi.LevelWarn, "Discord Gateway connection lost; reconnecting", "reason", reason,
		"attempt", strconv.Itoa(st.Attempt), "resume", strconv.FormatBool(st.SessionID != ""))
}

// fresh forgets the session: the next connection IDENTIFYs, and sequences start again.
func (g *conn) fresh(reason string) {
	st := g.st
	st.SessionID, st.ResumeURL, st.Seq = "", "", 0
	g.c.Log(abi.LevelWarn, "Discord ended the Gateway session; identifying anew", "reason", reason)
}

// closed handles the peer's close of the connection.
func (g *conn) closed(code int, reason string) {
	st := g.st
	if why, ok := permanentCloseCodes[code]; ok {
		st.Conn, st.Ready = "", false
		st.Halt = &halt{Code: code, Reason: why, At: g.now().UnixMilli()}
		g.fresh(fmt.Sprintf("close %d", code))
		g.c.Log(abi.LevelError, "Discord closed the Gateway for good; not reconnecting until the plugin is reloaded or hermes-host restarts",
			"close_code", strconv.Itoa(code), "reason", why)
		return
	}
	if slices.Contains(freshCloseCodes, code) {
		g.fresh(fmt.Sprintf("close %d %s", code, reason))
	}
	g.drop(fmt.Sprintf("closed by Discord (code %d %s)", code, reason), true)
}

// send writes one Gateway payload.
func (g *conn) send(op int, d any) error {
	raw, err := json.Marshal(map[string]any{"op": op, "d": d})
	if err != nil {
		return err
	}
	return g.c.WSSend(g.st.Conn, abi.WSFrame{Data: raw})
}

// heartbeat sends op 1 with the last recorded sequence.
func (g *conn) heartbeat() {
	st := g.st
	var d any
	if st.Seq > 0 {
		d = st.Seq
	}
	if err := g.send(opHeartbeat, d); err != nil {
		g.drop("heartbeat: "+err.Error(), true)
		return
	}
	st.BeatAt, st.AwaitAck = g.now().UnixMilli(), true
}

// connect opens the WebSocket (the session's resume URL when resuming), reads HELLO and
// sends RESUME (with the last recorded sequence) or IDENTIFY.
func (g *conn) connect() {
	c, st := g.c, g.st
	if st.Conn != "" {
		c.WSClose(st.Conn, closeResumable, "replaced")
		st.Conn = ""
	}
	// The open waits at most openWithin, and never past the call's deadline (less a margin to
	// answer): a slow Gateway is a failed connect, not a poll the host must stop.
	open := openWithin
	if !c.Deadline.IsZero() {
		open = min(open, max(time.Until(c.Deadline)-2*time.Second, 500*time.Millisecond))
	}
	url := g.cfg.GatewayURL
	if st.SessionID != "" && st.ResumeURL != "" {
		url = st.ResumeURL
	}
	id, err := c.WSOpen(&abi.WSOpenRequest{URL: gatewayURL(url), TimeoutMs: open.Milliseconds()})
	if err != nil && url != g.cfg.GatewayURL && abi.CodeOf(err) == abi.CodeDenied {
		// A resume URL the egress policy does not grant: resume on the configured Gateway.
		c.Log(abi.LevelWarn, "the session's resume_gateway_url is not reachable; resuming on gateway_url", "error", err.Error())
		st.ResumeURL = ""
		id, err = c.WSOpen(&abi.WSOpenRequest{URL: gatewayURL(g.cfg.GatewayURL), TimeoutMs: open.Milliseconds()})
	}
	if err != nil {
		g.drop("WebSocket: "+g.cfg.scrub(err.Error()), true)
		return
	}
	st.Conn, st.Ready, st.AwaitAck, st.IntervalMs = id, false, false, 0
	if err := g.save(); err != nil { // from here a crash leaves a connection to close, not to leak
		g.drop("saving the connection: "+err.Error(), true)
		return
	}
	r, err := c.WSRecv(id, helloWithin, 1)
	if err != nil || len(r.Frames) == 0 {
		if r != nil && r.Closed {
			st.Conn = ""
			g.closed(r.CloseCode, r.CloseReason)
			return
		}
		g.drop("no HELLO within "+helloWithin.String(), true)
		return
	}
	var hello struct {
		Op int `json:"op"`
		D  struct {
			HeartbeatInterval int64 `json:"heartbeat_interval"`
		} `json:"d"`
	}
	if json.Unmarshal(r.Frames[0].Data, &hello) != nil || hello.Op != opHello || hello.D.HeartbeatInterval <= 0 {
		g.drop("the first payload is not HELLO", true)
		return
	}
	st.IntervalMs = hello.D.HeartbeatInterval
	// The first heartbeat comes after a random part of the interval, as Discord asks.
	st.BeatAt = g.now().UnixMilli() - int64(float64(st.IntervalMs)*(1-jitter()))
	if st.SessionID != "" {
		err = g.send(opResume, map[string]any{"token": g.cfg.BotToken, "session_id": st.SessionID, "seq": st.Seq})
		st.Resumes++
	} else {
		err = g.send(opIdentify, map[string]any{"token": g.cfg.BotToken, "intents": Intents,
			"properties": map[string]string{"os": "wasip1", "browser": "hermes-host", "device": "hermes-host"}})
		st.Identifies++
	}
	if err != nil {
		g.drop("IDENTIFY/RESUME: "+err.Error(), true)
	}
}

func jitter() float64 {
	var b [8]byte
	rand.Read(b[:])
	return float64(binary.LittleEndian.Uint64(b[:])>>11) / float64(1<<53)
}

// handle acts on one payload; false stops reading the batch (the connection was dropped).
func (g *conn) handle(data []byte) bool {
	c, st := g.c, g.st
	var f gwFrame
	if err := json.Unmarshal(data, &f); err != nil {
		c.Log(abi.LevelWarn, "skipping an unreadable Gateway payload", "bytes", strconv.Itoa(len(data)), "error", err.Error())
		return true
	}
	switch f.Op {
	case opHeartbeatACK:
		st.AwaitAck = false
	case opHeartbeat:
		g.heartbeat()
	case opHello:
		var d struct {
			HeartbeatInterval int64 `json:"heartbeat_interval"`
		}
		if json.Unmarshal(f.D, &d) == nil && d.HeartbeatInterval > 0 {
			st.IntervalMs = d.HeartbeatInterval
		}
	case opReconnect:
		g.drop("Discord asked to reconnect (op 7)", false)
		return false
	case opInvalidSession:
		resumable := string(f.D) == "true"
		if !resumable {
			g.fresh("invalid session (op 9)")
		}
		g.drop(fmt.Sprintf("invalid session (op 9, resumable %v)", resumable), false)
		if !resumable {
			st.RetryAt = g.now().Add(invalidWait).UnixMilli()
		}
		return false
	case opDispatch:
		return g.dispatch(&f)
	}
	return true
}

// dispatch handles an event; the session's sequence advances once the host recorded it.
func (g *conn) dispatch(f *gwFrame) bool {
	c, st := g.c, g.st
	var ev *abi.InboundEvent
	switch f.T {
	case "READY":
		var d struct {
			SessionID string `json:"session_id"`
			ResumeURL string `json:"resume_gateway_url"`
			User      user   `json:"user"`
		}
		json.Unmarshal(f.D, &d)
		st.SessionID, st.ResumeURL, st.Ready, st.Attempt, st.LastError = d.SessionID, d.ResumeURL, true, 0, ""
		if d.User.ID != "" {
			st.BotID, st.BotName = d.User.ID, d.User.Username
		}
		c.Log(abi.LevelInfo, "connected to the Discord Gateway", "bot", st.BotName, "identifies", strconv.Itoa(st.Identifies))
	case "RESUMED":
		st.Ready, st.Attempt, st.LastError = true, 0, ""
		c.Log(abi.LevelInfo, "resumed the Discord Gateway session", "seq", strconv.FormatInt(st.Seq, 10), "resumes", strconv.Itoa(st.Resumes))
	case "MESSAGE_CREATE", "MESSAGE_DELETE":
		var probe struct {
			ChannelID string `json:"channel_id"`
			GuildID   string `json:"guild_id"`
		}
		json.Unmarshal(f.D, &probe)
		o := mapOptions{BotID: st.BotID, RequireMention: g.cfg.requireMention(), FreeResponse: g.cfg.freeResponse}
		if probe.GuildID != "" {
			o.Channel = g.channel(probe.ChannelID)
			if g.cfg.followThreads() {
				o.Followed = func(thread string) bool { return g.followed(thread) }
			}
		}
		mapFn := mapMessage
		if f.T == "MESSAGE_DELETE" {
			mapFn = mapDeletion
		}
		m, err := mapFn(f.D, o)
		switch {
		case err != nil:
			c.Log(abi.LevelWarn, "skipping an unreadable "+f.T, "error", err.Error())
		case m.Event == nil:
			c.Log(abi.LevelDebug, "skipping "+f.T, "reason", m.Skip)
		default:
			ev = m.Event
			if m.Follow != "" {
				g.follow(m.Follow)
			}
		}
	case "THREAD_CREATE", "THREAD_UPDATE", "CHANNEL_CREATE", "CHANNEL_UPDATE":
		g.remember(f.D)
	case "GUILD_CREATE", "THREAD_LIST_SYNC":
		var d struct {
			Channels []json.RawMessage `json:"channels"`
			Threads  []json.RawMessage `json:"threads"`
		}
		json.Unmarshal(f.D, &d)
		for _, ch := range append(d.Threads, d.Channels...) {
			g.remember(ch)
		}
	}
	if ev != nil && !g.deliver(*ev) {
		// Not recorded: the sequence stays, and the connection is replaced, so that the RESUME
		// replays this event.
		g.drop("the host could not record an event", true)
		return false
	}
	if f.S != nil {
		if g.returnMode {
			st.Owed = max(st.Owed, *f.S)
		} else {
			st.Seq = max(st.Seq, *f.S)
		}
	}
	return true
}

// deliver hands an event to the host (hermes_dispatch records it durably and deduplicates it
// before answering). Without a dispatch function the event is returned from poll instead.
func (g *conn) deliver(ev abi.InboundEvent) bool {
	if g.returnMode {
		g.returned = append(g.returned, ev)
		return true
	}
	_, err := g.c.Dispatch(ev)
	switch {
	case err == nil:
		return true
	case abi.CodeOf(err) == abi.CodeUnavailable:
		g.returnMode = true
		g.st.Owed = g.st.Seq
		g.returned = append(g.returned, ev)
		return true
	}
	g.c.Log(abi.LevelWarn, "the host could not record an event", "id", ev.ID, "error", err.Error())
	return false
}

// --- channels and followed threads, in fixed kv slots ---

func slot(prefix, id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return prefix + strconv.Itoa(int(h.Sum32()%cacheSlots))
}

type cachedChannel struct {
	ID string `json:"id"`
	channelInfo
}

// remember caches a channel object's type and parent.
func (g *conn) remember(raw json.RawMessage) {
	var ch struct {
		ID       string `json:"id"`
		Type     int    `json:"type"`
		ParentID string `json:"parent_id"`
	}
	if json.Unmarshal(raw, &ch) != nil || ch.ID == "" {
		return
	}
	v, _ := json.Marshal(cachedChannel{ID: ch.ID, channelInfo: channelInfo{Type: ch.Type, Parent: ch.ParentID}})
	g.c.KVSet(slot("ch:", ch.ID), v)
}

// channel is what is known of a guild channel: from the cache, else GET /channels/{id}.
func (g *conn) channel(id string) channelInfo {
	if raw, found, err := g.c.KVGet(slot("ch:", id)); err == nil && found {
		var cc cachedChannel
		if json.Unmarshal(raw, &cc) == nil && cc.ID == id {
			return cc.channelInfo
		}
	}
	r, err := newAPI(g.c, g.cfg).call("GET", "/channels/"+id, nil)
	if err != nil || !r.ok() || !r.JSON {
		desc := ""
		if err != nil {
			desc = err.Error()
		} else {
			desc = r.describe()
		}
		g.c.Log(abi.LevelWarn, "could not look the channel up; taking it for a channel, not a thread", "channel", id, "error", desc)
		return channelInfo{}
	}
	g.remember(r.Body)
	var ch struct {
		Type     int    `json:"type"`
		ParentID string `json:"parent_id"`
	}
	json.Unmarshal(r.Body, &ch)
	return channelInfo{Type: ch.Type, Parent: ch.ParentID}
}

func (g *conn) followed(thread string) bool {
	raw, found, err := g.c.KVGet(slot("follow:", thread))
	return err == nil && found && string(raw) == thread
}

func (g *conn) follow(thread string) {
	if g.followed(thread) {
		return
	}
	g.c.KVSet(slot("follow:", thread), []byte(thread))
}

// status reports the connection to the operator.
func (g *conn) status() *abi.ProfileStatus {
	st := g.st
	switch {
	case st.Halt != nil:
		return &abi.ProfileStatus{State: abi.StatusStopped, Message: fmt.Sprintf(
			"Discord closed the Gateway with code %d (%s) at %s: not reconnecting; fix the cause, then reload the plugin or restart hermes-host",
			st.Halt.Code, st.Halt.Reason, time.UnixMilli(st.Halt.At).UTC().Format(time.RFC3339))}
	case st.Conn != "" && st.Ready:
		return &abi.ProfileStatus{State: abi.StatusOK, Message: fmt.Sprintf("connected as %s (seq %d, %d identifies, %d resumes)",
			st.BotName, st.Seq, st.Identifies, st.Resumes)}
	case st.LastError != "":
		in := time.UnixMilli(st.RetryAt).Sub(g.now()).Round(time.Second)
		return &abi.ProfileStatus{State: abi.StatusDegraded, Message: fmt.Sprintf("not connected: %s; reconnecting in %v", st.LastError, max(in, 0))}
	}
	return &abi.ProfileStatus{State: abi.StatusDegraded, Message: "connecting"}
}
