package slacktest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/conformance/internal/change"
)

// Defaults of the app and the workspace every Server starts with.
const (
	DefaultAppID         = "A0HERMES01"
	DefaultSigningSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	DefaultAppToken      = "xapp-1-A0HERMES01-1000000001-hermestestapptoken"
	DefaultTeamID        = "T0HERMES01"
	DefaultBotToken      = "xoxb-1000000001-2000000001-hermestestbottoken"
	DefaultBotUserID     = "U0HERMESBOT"
	DefaultBotID         = "B0HERMES01"
	// VerificationToken is the deprecated token field of every payload.
	VerificationToken = "Jhj5dZrVaK7ZwHHjRyZWjbDl"
)

// MaxTextLength is where Slack truncates a message's text (in characters).
const MaxTextLength = 40000

// ErrTimeout is returned by the Wait methods when the condition did not hold in time.
var ErrTimeout = errors.New("slacktest: timed out waiting for condition")

// TB is the part of testing.TB that New uses: Close is registered with Cleanup.
type TB interface {
	Cleanup(func())
}

// Option configures a Server.
type Option func(*config)

type config struct {
	clock         Clock
	ackTimeout    time.Duration
	retries       []time.Duration
	signing       string
	appToken      string
	botEcho       bool
	limits        *RateLimits
	socketPing    time.Duration
	noDefaultTeam bool
	asyncShares   bool
}

// WithClock sets the clock used for timestamps, signatures and rate limits (default: the wall
// clock). Delivery timeouts and retry pauses always use real time.
func WithClock(c Clock) Option { return func(o *config) { o.clock = c } }

// WithAckTimeout sets how long the receiver has to acknowledge an event, over HTTP or Socket
// Mode (default 3s, as Slack).
func WithAckTimeout(d time.Duration) Option { return func(o *config) { o.ackTimeout = d } }

// WithRetrySchedule sets the pauses before each retry of an unacknowledged event (default
// Slack's: at once, after 1 minute, after 5 minutes). Its length is the number of retries.
func WithRetrySchedule(pauses ...time.Duration) Option {
	return func(o *config) { o.retries = append([]time.Duration(nil), pauses...) }
}

// WithSigningSecret sets the app's signing secret (default DefaultSigningSecret).
func WithSigningSecret(s string) Option { return func(o *config) { o.signing = s } }

// WithoutBotEcho stops the fake from delivering a bot's own posts back as message events (Slack
// does deliver them, with bot_id set, to apps subscribed to message events).
func WithoutBotEcho() Option { return func(o *config) { o.botEcho = false } }

// WithRateLimits turns on the per-channel limiter on chat.postMessage (off by default; faults
// can still inject 429s).
func WithRateLimits(l RateLimits) Option { return func(o *config) { o.limits = &l } }

// WithAsyncShares makes files.completeUploadExternal answer without the files' shares (their
// message ts), as Slack does when it shares the files after answering.
func WithAsyncShares() Option { return func(o *config) { o.asyncShares = true } }

// WithoutDefaultTeam leaves out the workspace DefaultTeamID.
func WithoutDefaultTeam() Option { return func(o *config) { o.noDefaultTeam = true } }

// Server is a fake Slack (Web API, Events API delivery and Socket Mode) on loopback. All its
// methods are safe for concurrent use.
type Server struct {
	cfg  config
	hs   *httptest.Server // the Web API (Slack's slack.com)
	link *httptest.Server // Socket Mode's WebSocket endpoint (Slack's wss-primary.slack.com)
	hook *http.Client

	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	closeOnce sync.Once
	workers   sync.WaitGroup

	mu          sync.Mutex
	changed     change.Signal // notified on every state change
	teams       map[string]*Team
	order       []*Team
	tokens      map[string]*Team // bot token → team
	requests    []*Request
	faults      map[string][]Fault
	held        []chan struct{} // answers parked by Hold faults
	messages    []*Message
	statuses    []Status
	seq         int64 // message timestamp sequence
	eventSeq    int64
	envelopes   map[string]*pending // by event id
	queue       []*pending          // not yet handed to a transport, oldest first
	requestURL  string
	deliveries  []Delivery
	socketMode  bool
	sock        *socketState
	limiter     *limiter
	files       []*File
	fileSeq     int64
	downloads   []Download
	interactSeq int64
	interactURL string
}

// New starts a fake Slack on 127.0.0.1 with one app and the workspace DefaultTeamID (bot token
// DefaultBotToken, bot user DefaultBotUserID). tb may be nil; when it is not, Close runs at its
// Cleanup.
func New(tb TB, opts ...Option) *Server {
	cfg := config{
		clock:      RealClock{},
		ackTimeout: 3 * time.Second,
		retries:    []time.Duration{0, time.Minute, 5 * time.Minute},
		signing:    DefaultSigningSecret,
		appToken:   DefaultAppToken,
		botEcho:    true,
		socketPing: 10 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:       cfg,
		ctx:       ctx,
		cancel:    cancel,
		teams:     map[string]*Team{},
		tokens:    map[string]*Team{},
		faults:    map[string][]Fault{},
		envelopes: map[string]*pending{},
		hook:      &http.Client{Timeout: cfg.ackTimeout, Transport: &http.Transport{}},
	}
	s.sock = &socketState{tickets: map[string]bool{}}
	if cfg.limits != nil {
		s.limiter = newLimiter(*cfg.limits)
	}
	if !cfg.noDefaultTeam {
		s.AddTeam(DefaultTeamID, "Hermes Test", DefaultBotToken)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.serveAPI)
	// files.slack.com's paths, on the same address: slack-go sends the token only to the API's
	// host (or an https Slack one).
	mux.HandleFunc("/upload/v1/", s.serveUpload)
	mux.HandleFunc("/files-pri/", s.serveFile)
	mux.HandleFunc("/signin", s.serveSignin)
	s.hs = httptest.NewServer(mux)
	// Socket Mode lives on an address of its own, as Slack's does on another host: a proxy or
	// an egress policy has to let the plugin reach both (README, "Pointing a platform plugin at
	// a proxy or a fake").
	link := http.NewServeMux()
	link.HandleFunc("/link/", s.serveSocket)
	s.link = httptest.NewServer(link)
	if tb != nil {
		tb.Cleanup(s.Close)
	}
	return s
}

// URL returns the server's base URL (http://127.0.0.1:port).
func (s *Server) URL() string { return s.hs.URL }

// APIURL returns the Web API base to use in place of https://slack.com/api (no trailing
// slash; slack-go's OptionAPIURL wants it with one).
func (s *Server) APIURL() string { return s.hs.URL + "/api" }

// SocketURL returns the address apps.connections.open sends Socket Mode clients to
// (ws://127.0.0.1:port, another port than URL's): Slack's is wss-primary.slack.com, another host
// than slack.com.
func (s *Server) SocketURL() string { return strings.Replace(s.link.URL, "http://", "ws://", 1) }

// SigningSecret returns the app's signing secret.
func (s *Server) SigningSecret() string { return s.cfg.signing }

// AppToken returns the app-level token (xapp-) that apps.connections.open accepts.
func (s *Server) AppToken() string { return s.cfg.appToken }

// Clock returns the server's clock.
func (s *Server) Clock() Clock { return s.cfg.clock }

// Close stops event delivery, closes Socket Mode connections, releases held answers and shuts
// the server down.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		s.mu.Lock()
		for _, h := range s.held {
			close(h)
		}
		s.held = nil
		s.mu.Unlock()
		s.closeSockets()
		s.hs.CloseClientConnections()
		s.hs.Close()
		s.link.CloseClientConnections()
		s.link.Close()
		s.workers.Wait()
		s.hook.CloseIdleConnections()
	})
}

// changedLocked wakes everything waiting for a state change. s.mu must be held.
func (s *Server) changedLocked() {
	s.changed.Notify()
}

func (s *Server) notify() {
	s.mu.Lock()
	s.changedLocked()
	s.mu.Unlock()
}

// Wait blocks until cond returns true, re-evaluating it after every change of the fake's state
// (a request, a post, an event delivered or acknowledged). cond runs without the server's lock,
// so it may call any Server method.
func (s *Server) Wait(timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch err := change.Wait(ctx, &s.mu, &s.changed, s.ctx.Done(), cond); {
	case errors.Is(err, change.ErrClosed):
		return errors.New("slacktest: server closed")
	case err != nil:
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return nil
}

// sleep waits d, or less when ctx ends or the server closes; it reports whether d elapsed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
	return false
}

// Team is a workspace with the app installed: its bot token and bot user, its users and
// channels.
type Team struct {
	s        *Server
	ID       string
	Name     string
	BotToken string
	BotUser  string
	BotID    string

	channels map[string]*channel
	users    map[string]string // id → name
}

type channel struct {
	id     string
	name   string
	typ    string // channel, group, im, mpim
	member bool   // the bot is a member
	user   string // the other party of an im
}

// AddTeam installs the app in another workspace, with its own bot token. Its bot user id is
// derived from the team id. Adding an existing team returns it.
func (s *Server) AddTeam(id, name, botToken string) *Team {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.teams[id]; t != nil {
		return t
	}
	t := &Team{s: s, ID: id, Name: name, BotToken: botToken, BotUser: DefaultBotUserID, BotID: DefaultBotID,
		channels: map[string]*channel{}, users: map[string]string{}}
	if len(s.order) > 0 {
		suffix := strings.TrimPrefix(id, "T")
		t.BotUser, t.BotID = "U0BOT"+suffix, "B0BOT"+suffix
	}
	s.teams[id] = t
	s.order = append(s.order, t)
	s.tokens[botToken] = t
	return t
}

// Team returns the workspace with id, or the first one when id is "".
func (s *Server) Team(id ...string) *Team {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(id) == 0 || id[0] == "" {
		if len(s.order) == 0 {
			return nil
		}
		return s.order[0]
	}
	return s.teams[id[0]]
}

// AddUser adds a person to the team and returns their id.
func (t *Team) AddUser(id, name string) string {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.users[id] = name
	return id
}

// AddChannel adds a public channel the bot is a member of.
func (t *Team) AddChannel(id, name string) string { return t.addChannel(id, name, "channel", true, "") }

// AddPrivateChannel adds a private channel ("group") the bot is a member of.
func (t *Team) AddPrivateChannel(id, name string) string {
	return t.addChannel(id, name, "group", true, "")
}

// AddForeignChannel adds a public channel the bot is not a member of (posting there is
// not_in_channel).
func (t *Team) AddForeignChannel(id, name string) string {
	return t.addChannel(id, name, "channel", false, "")
}

// AddDM opens the direct-message channel between the bot and user and returns its id (D...).
func (t *Team) AddDM(user string) string {
	id := "D" + strings.TrimPrefix(user, "U")
	return t.addChannel(id, "", "im", true, user)
}

func (t *Team) addChannel(id, name, typ string, member bool, user string) string {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if c := t.channels[id]; c != nil {
		return id
	}
	t.channels[id] = &channel{id: id, name: name, typ: typ, member: member, user: user}
	return id
}

func (t *Team) channel(id string) *channel {
	return t.channels[id]
}

// nextTSLocked returns a new message timestamp: the clock's seconds and a sequence number,
// unique and increasing across the server. s.mu must be held.
func (s *Server) nextTSLocked() string {
	s.seq++
	return strconv.FormatInt(s.cfg.clock.Now().Unix(), 10) + "." + fmt.Sprintf("%06d", s.seq%1000000)
}

// Messages returns the messages of a channel (bot posts and injected user messages), oldest
// first. thread selects a thread by its root ts: "" for every message of the channel, "-" for
// top-level messages only.
func (s *Server) Messages(team, channelID, thread string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if m.Team != team || m.Channel != channelID {
			continue
		}
		switch {
		case thread == "":
		case thread == "-" && m.ThreadTS != "":
			continue
		case thread != "-" && m.ThreadTS != thread && m.TS != thread:
			continue
		}
		c := *m
		c.Edits = append([]string(nil), m.Edits...)
		out = append(out, c)
	}
	return out
}

// Posted returns the bot's posts in a channel's thread (thread = root ts; "-" for top-level
// posts, "" for all), oldest first.
func (s *Server) Posted(team, channelID, thread string) []Message {
	var out []Message
	for _, m := range s.Messages(team, channelID, thread) {
		if m.BotID != "" && (thread == "" || thread == "-" || m.TS != thread) {
			out = append(out, m)
		}
	}
	return out
}

// PostedTexts returns the texts of Posted.
func (s *Server) PostedTexts(team, channelID, thread string) []string {
	var out []string
	for _, m := range s.Posted(team, channelID, thread) {
		out = append(out, m.Text)
	}
	return out
}

// AllPosted returns every bot post, in the order the fake accepted them.
func (s *Server) AllPosted() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if m.BotID != "" {
			out = append(out, *m)
		}
	}
	return out
}

// Statuses returns the assistant thread statuses set, oldest first.
func (s *Server) Statuses() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Status(nil), s.statuses...)
}

// Requests returns the recorded Web API requests for method ("" for all), oldest first.
func (s *Server) Requests(method string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if method == "" || r.Method == method {
			c := *r
			c.Params = make(map[string]string, len(r.Params))
			for k, v := range r.Params {
				c.Params[k] = v
			}
			out = append(out, c)
		}
	}
	return out
}

// WaitRequests waits until at least n answered (or cut) requests for method were recorded.
func (s *Server) WaitRequests(method string, n int, timeout time.Duration) ([]Request, error) {
	var got []Request
	err := s.Wait(timeout, func() bool {
		got = got[:0]
		for _, r := range s.Requests(method) {
			if r.Status != 0 || r.Fault != "" {
				got = append(got, r)
			}
		}
		return len(got) >= n
	})
	return got, err
}
