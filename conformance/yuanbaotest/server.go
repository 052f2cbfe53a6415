package yuanbaotest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// The default bot, present unless WithoutDefaultBot is given.
const (
	DefaultAppID  = "yb-app-0001"
	DefaultSecret = "yb-secret-0001"
	DefaultBotID  = "bot_1001"
	DefaultOwner  = "owner_7"
)

// Paths the fake serves.
const (
	SignPath = "/api/v5/robotLogic/sign-token"
	WSPath   = "/wss/connection"
)

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	srv      *httptest.Server
	clock    func() time.Time
	skew     time.Duration
	duration time.Duration
	// signLimit tokens at most per app_key within signWindow (0: no limit).
	signLimit  int
	signWindow time.Duration

	mu         sync.Mutex
	bots       []*Bot
	signs      []SignRequest
	signFaults []SignFault
	conns      int
	msgs       int
	violations []string
}

// Option configures a Server.
type Option func(*Server)

// WithClock sets the fake's clock (token expiry, timestamp checks). Default time.Now.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.clock = now } }

// WithBot adds a bot.
func WithBot(appID, secret, botID, owner string) Option {
	return func(s *Server) { s.bots = append(s.bots, newBot(s, appID, secret, botID, owner)) }
}

// WithoutDefaultBot leaves out the default bot.
func WithoutDefaultBot() Option {
	return func(s *Server) {
		if len(s.bots) > 0 && s.bots[0].appID == DefaultAppID {
			s.bots = s.bots[1:]
		}
	}
}

// WithTokenDuration sets the duration sign-token grants (default one hour; 0 is answered as 0,
// which clients read as one hour).
func WithTokenDuration(d time.Duration) Option { return func(s *Server) { s.duration = d } }

// WithSignLimit sets sign-token's rate limit: at most n tokens per app_key within window
// (default DefaultSignLimit per DefaultSignWindow; n 0 turns the limit off).
func WithSignLimit(n int, window time.Duration) Option {
	return func(s *Server) { s.signLimit, s.signWindow = n, window }
}

// WithMaxSkew sets how far a sign-token timestamp may be from the fake's clock (default 5 min).
func WithMaxSkew(d time.Duration) Option { return func(s *Server) { s.skew = d } }

// New starts a fake on 127.0.0.1. With t, it is closed when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	s := &Server{clock: time.Now, skew: 5 * time.Minute, duration: time.Hour, signLimit: DefaultSignLimit, signWindow: DefaultSignWindow}
	s.bots = []*Bot{newBot(s, DefaultAppID, DefaultSecret, DefaultBotID, DefaultOwner)}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(SignPath, s.serveSign)
	mux.HandleFunc(WSPath, s.serveWS)
	s.srv = httptest.NewServer(mux)
	if t != nil {
		t.Cleanup(s.Close)
	}
	return s
}

// Close closes every connection and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	var conns []*wsConn
	for _, b := range s.bots {
		conns = append(conns, b.conns...)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.c.CloseNow()
	}
	s.srv.Close()
}

// URL is the API base (a profile's api_domain).
func (s *Server) URL() string { return s.srv.URL }

// WSURL is the gateway's WebSocket URL (a profile's ws_url).
func (s *Server) WSURL() string { return "ws" + strings.TrimPrefix(s.srv.URL, "http") + WSPath }

// Bot returns the first bot (the default one unless WithoutDefaultBot).
func (s *Server) Bot() *Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bots[0]
}

// BotByAppID returns the bot with that app id, or nil.
func (s *Server) BotByAppID(appID string) *Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.botLocked(appID)
}

func (s *Server) botLocked(appID string) *Bot {
	for _, b := range s.bots {
		if b.appID == appID {
			return b
		}
	}
	return nil
}

// Wait polls cond until it holds or timeout passes.
func (s *Server) Wait(timeout time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("yuanbaotest: condition not met within %v", timeout)
		}
	}
}

// Violations lists protocol mistakes the fake saw from clients (requests before AUTH_BIND,
// frames it could not decode, text frames…).
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

func (s *Server) violation(format string, args ...any) {
	s.mu.Lock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *Server) nextMsgID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs++
	return fmt.Sprintf("msg-%04d", s.msgs)
}
