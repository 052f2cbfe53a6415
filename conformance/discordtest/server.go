package discordtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Defaults of a new Server.
const (
	DefaultToken    = "MTAwMDAwMDAwMDAwMDAwMDAx.fake.discordtest-bot-token"
	DefaultBotID    = "1000000000000000001"
	DefaultGuildID  = "2000000000000000001"
	DefaultAppName  = "hermes"
	MaxContent      = 2000 // Discord's limit on a message's content, in characters
	defaultInterval = 41250 * time.Millisecond
)

// Channel types, as Discord numbers them.
const (
	TypeText         = 0
	TypeDM           = 1
	TypePublicThread = 11
)

// The people of the fake (any User works; these are for convenience).
var (
	Ann = User{ID: "3000000000000000001", Username: "ann"}
	Bob = User{ID: "3000000000000000002", Username: "bob"}
	// OtherBot is another bot in the guild: its messages carry bot: true.
	OtherBot = User{ID: "3000000000000000099", Username: "otherbot", Bot: true}
)

// User is a Discord user.
type User struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Bot      bool   `json:"bot,omitempty"`
}

// Channel is a guild text channel, a thread (ParentID set) or a DM.
type Channel struct {
	ID       string
	GuildID  string // "" for a DM
	ParentID string // a thread's channel
	Name     string
	Type     int
	DMUser   string // a DM's recipient
}

// Pings is who a message notified.
type Pings struct {
	Everyone bool     // @everyone or @here notified the channel
	Users    []string // users notified
	Roles    []string // roles notified
}

// Any reports whether the message notified anyone.
func (p Pings) Any() bool { return p.Everyone || len(p.Users) > 0 || len(p.Roles) > 0 }

// Message is a message in a channel.
type Message struct {
	ID        string
	ChannelID string
	GuildID   string
	Author    User
	Content   string
	ReplyTo   string // message_reference.message_id
	Edits     int
	// AllowedMentions is the request's allowed_mentions, verbatim (nil: none given).
	AllowedMentions json.RawMessage
	Pinged          Pings
	Nonce           string
	At              time.Time
}

// Server is a fake Discord.
type Server struct {
	ctx    context.Context
	cancel context.CancelFunc
	rest   *httptest.Server
	gw     *httptest.Server

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change (Wait)
	token     string
	bot       User
	interval  time.Duration
	seq       uint64
	channels  map[string]*Channel
	messages  []*Message
	users     map[string]User
	faults    map[string][]Fault
	limits    map[string]RouteLimit // by channel; "" for every channel
	buckets   map[string]*bucket
	requests  []Request
	rlHits    int
	globalEnd time.Time
	held      []chan struct{}

	// gateway
	sess        *session   // the bot's current session (nil before the first IDENTIFY)
	sessions    []*session // every session ever started
	pending     []dispatch // events while no session is valid
	conns       []*gwConn
	connsOpened int
	identifies  []Identify
	resumes     []Resume
	heartbeats  []Heartbeat
	violations  []string
	expireNext  bool
	dropNext    bool
}

// Option configures a Server.
type Option func(*Server)

// WithHeartbeatInterval sets the heartbeat_interval HELLO announces (Discord: 41.25 s).
func WithHeartbeatInterval(d time.Duration) Option { return func(s *Server) { s.interval = d } }

// WithToken sets the bot token (default DefaultToken).
func WithToken(tok string) Option { return func(s *Server) { s.token = tok } }

// New starts a fake Discord on loopback, closed at t's cleanup (t may be nil: call Close).
func New(t testing.TB, opts ...Option) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ctx: ctx, cancel: cancel, changed: make(chan struct{}), token: DefaultToken,
		bot: User{ID: DefaultBotID, Username: DefaultAppName, Bot: true}, interval: defaultInterval,
		channels: map[string]*Channel{}, users: map[string]User{}, faults: map[string][]Fault{},
		limits: map[string]RouteLimit{"": DefaultRouteLimit()}, buckets: map[string]*bucket{}}
	for _, o := range opts {
		o(s)
	}
	for _, u := range []User{Ann, Bob, OtherBot, s.bot} {
		s.users[u.ID] = u
	}
	s.rest = httptest.NewServer(http.HandlerFunc(s.serveREST))
	s.gw = httptest.NewServer(http.HandlerFunc(s.serveGateway))
	if t != nil {
		t.Cleanup(s.Close)
	}
	return s
}

// Close cuts every connection and stops the servers.
func (s *Server) Close() {
	s.cancel()
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	for _, h := range s.held {
		close(h)
	}
	s.held = nil
	s.mu.Unlock()
	for _, c := range conns {
		c.c.CloseNow()
	}
	s.gw.Close()
	s.rest.Close()
}

// APIURL is the REST API's base (a profile's api_base): http://127.0.0.1:port/api/v10.
func (s *Server) APIURL() string { return s.rest.URL + "/api/v10" }

// RESTAddr is the REST listener's host:port.
func (s *Server) RESTAddr() string { return strings.TrimPrefix(s.rest.URL, "http://") }

// GatewayURL is the Gateway's WebSocket URL (a profile's gateway_url).
func (s *Server) GatewayURL() string { return "ws" + strings.TrimPrefix(s.gw.URL, "http") + "/" }

// GatewayAddr is the Gateway listener's host:port.
func (s *Server) GatewayAddr() string { return strings.TrimPrefix(s.gw.URL, "http://") }

// Token is the bot token.
func (s *Server) Token() string { return s.token }

// BotUser is the bot's user.
func (s *Server) BotUser() User { return s.bot }

// Guild returns DefaultGuildID (the fake has one guild; channels name their guild).
func (s *Server) Guild() string { return DefaultGuildID }

// AddUser makes u known, so that a mention of it in content lists it in mentions.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = u
}

// AddChannel adds a text channel to guild.
func (s *Server) AddChannel(guild, id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels[id] = &Channel{ID: id, GuildID: guild, Name: name, Type: TypeText}
	s.changedLocked()
}

// AddThread adds a public thread under parent and dispatches THREAD_CREATE.
func (s *Server) AddThread(parent, id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatchLocked("THREAD_CREATE", channelJSON(s.addThreadLocked(parent, id, name)))
}

// AddThreadUnannounced adds a thread without dispatching THREAD_CREATE: one the bot did not
// hear of (created while its session was gone, or a private thread it was just added to). A
// client learns what it is from GET /channels/{id}, or the next GUILD_CREATE.
func (s *Server) AddThreadUnannounced(parent, id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addThreadLocked(parent, id, name)
	s.changedLocked()
}

func (s *Server) addThreadLocked(parent, id, name string) *Channel {
	p := s.channels[parent]
	guild := DefaultGuildID
	if p != nil {
		guild = p.GuildID
	}
	ch := &Channel{ID: id, GuildID: guild, ParentID: parent, Name: name, Type: TypePublicThread}
	s.channels[id] = ch
	return ch
}

// DMChannel returns the id of the DM channel with u (created on first use).
func (s *Server) DMChannel(u User) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dmLocked(u)
}

func (s *Server) dmLocked(u User) string {
	for _, c := range s.channels {
		if c.Type == TypeDM && c.DMUser == u.ID {
			return c.ID
		}
	}
	id := s.snowflakeLocked()
	s.channels[id] = &Channel{ID: id, Type: TypeDM, DMUser: u.ID, Name: u.Username}
	s.users[u.ID] = u
	return id
}

func channelJSON(c *Channel) map[string]any {
	m := map[string]any{"id": c.ID, "type": c.Type, "name": c.Name}
	if c.GuildID != "" {
		m["guild_id"] = c.GuildID
	}
	if c.ParentID != "" {
		m["parent_id"] = c.ParentID
	}
	return m
}

// snowflakeLocked is a new id: milliseconds since Discord's epoch, then a counter.
func (s *Server) snowflakeLocked() string {
	s.seq++
	ms := uint64(time.Now().UnixMilli() - 1420070400000)
	return strconv.FormatUint(ms<<22|(s.seq&0x3fffff), 10)
}

// MsgOption shapes a message a user says.
type MsgOption func(*Message)

// ReplyingTo makes the message a reply to id (message_reference; referenced_message).
func ReplyingTo(id string) MsgOption { return func(m *Message) { m.ReplyTo = id } }

// Say has user post content into channel and dispatches MESSAGE_CREATE.
func (s *Server) Say(channel string, user User, content string, opts ...MsgOption) *Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[user.ID] = user
	ch := s.channels[channel]
	m := &Message{ID: s.snowflakeLocked(), ChannelID: channel, Author: user, Content: content, At: time.Now()}
	if ch != nil {
		m.GuildID = ch.GuildID
	}
	for _, o := range opts {
		o(m)
	}
	m.Pinged = s.pingsLocked(content, nil)
	s.messages = append(s.messages, m)
	s.dispatchLocked("MESSAGE_CREATE", s.messageJSONLocked(m))
	return m
}

// Mention has user mention the bot at the start of text in channel.
func (s *Server) Mention(channel string, user User, text string) *Message {
	return s.Say(channel, user, "<@"+s.bot.ID+"> "+text)
}

// Reply has user reply to message id in channel.
func (s *Server) Reply(channel string, user User, id, text string) *Message {
	return s.Say(channel, user, text, ReplyingTo(id))
}

// DM has user write text to the bot in their DM channel.
func (s *Server) DM(user User, text string) *Message {
	return s.Say(s.DMChannel(user), user, text)
}

var mentionRE = regexp.MustCompile(`<@!?(\d+)>`)
var roleRE = regexp.MustCompile(`<@&(\d+)>`)

func (s *Server) messageJSONLocked(m *Message) map[string]any {
	mentions := []any{}
	for _, id := range mentionedUsers(m.Content) {
		u, ok := s.users[id]
		if !ok {
			u = User{ID: id, Username: "user" + id[len(id)-4:]}
		}
		mentions = append(mentions, u)
	}
	out := map[string]any{"id": m.ID, "channel_id": m.ChannelID, "author": m.Author, "content": m.Content,
		"timestamp": m.At.UTC().Format(time.RFC3339Nano), "mentions": mentions, "mention_roles": mentionedRoles(m.Content),
		"mention_everyone": strings.Contains(m.Content, "@everyone") || strings.Contains(m.Content, "@here"),
		"type":             0, "tts": false, "attachments": []any{}, "embeds": []any{}, "pinned": false}
	if m.GuildID != "" {
		out["guild_id"] = m.GuildID
		out["member"] = map[string]any{"roles": []any{}}
	}
	if m.Nonce != "" {
		out["nonce"] = m.Nonce
	}
	if m.ReplyTo != "" {
		out["type"] = 19
		out["message_reference"] = map[string]any{"message_id": m.ReplyTo, "channel_id": m.ChannelID, "guild_id": m.GuildID}
		for _, r := range s.messages {
			if r.ID == m.ReplyTo {
				out["referenced_message"] = map[string]any{"id": r.ID, "channel_id": r.ChannelID, "author": r.Author,
					"content": r.Content, "type": 0, "mentions": []any{}, "attachments": []any{}, "embeds": []any{}}
			}
		}
	}
	return out
}

func mentionedUsers(content string) []string {
	var out []string
	for _, m := range mentionRE.FindAllStringSubmatch(content, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

func mentionedRoles(content string) []string {
	out := []string{}
	for _, m := range roleRE.FindAllStringSubmatch(content, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// allowedMentions is Discord's allowed_mentions object.
type allowedMentions struct {
	Parse       *[]string `json:"parse"`
	Users       []string  `json:"users"`
	Roles       []string  `json:"roles"`
	RepliedUser bool      `json:"replied_user"`
}

// pingsLocked computes whom content notifies under allowed_mentions (raw; nil: none given, so
// everything in the content notifies, as Discord does).
func (s *Server) pingsLocked(content string, raw json.RawMessage) Pings {
	parse := []string{"everyone", "users", "roles"}
	var am allowedMentions
	if len(raw) > 0 && string(raw) != "null" && json.Unmarshal(raw, &am) == nil {
		parse = nil
		if am.Parse != nil {
			parse = *am.Parse
		}
	} else {
		am = allowedMentions{}
	}
	var p Pings
	if slices.Contains(parse, "everyone") && (strings.Contains(content, "@everyone") || strings.Contains(content, "@here")) {
		p.Everyone = true
	}
	for _, id := range mentionedUsers(content) {
		if slices.Contains(parse, "users") || slices.Contains(am.Users, id) {
			p.Users = append(p.Users, id)
		}
	}
	for _, id := range mentionedRoles(content) {
		if slices.Contains(parse, "roles") || slices.Contains(am.Roles, id) {
			p.Roles = append(p.Roles, id)
		}
	}
	return p
}

// Posted returns the bot's messages in channel, oldest first.
func (s *Server) Posted(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if m.ChannelID == channel && m.Author.ID == s.bot.ID {
			out = append(out, *m)
		}
	}
	return out
}

// PostedTexts returns the contents of Posted(channel).
func (s *Server) PostedTexts(channel string) []string {
	var out []string
	for _, m := range s.Posted(channel) {
		out = append(out, m.Content)
	}
	return out
}

// AllPosted returns every message the bot posted, oldest first.
func (s *Server) AllPosted() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if m.Author.ID == s.bot.ID {
			out = append(out, *m)
		}
	}
	return out
}

// Wait waits until cond holds (checked at every change and every 20 ms), or timeout.
func (s *Server) Wait(timeout time.Duration, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(20 * time.Millisecond):
		case <-deadline.C:
			if cond() {
				return nil
			}
			return fmt.Errorf("discordtest: condition not met within %v", timeout)
		case <-s.ctx.Done():
			return fmt.Errorf("discordtest: server closed")
		}
	}
}

func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Violations lists protocol mistakes the fake saw (an unknown opcode, a dispatch sent by the
// client, a frame that is not JSON…).
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

func (s *Server) violationLocked(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
	s.changedLocked()
}
