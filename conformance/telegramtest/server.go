package telegramtest

import (
	"context"
	"encoding/json"
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

// DefaultToken is the token of the bot every Server starts with; DefaultBotUsername is its
// username.
const (
	DefaultToken       = "123456789:AAF-hermes-host-telegramtest-default"
	DefaultBotUsername = "hermes_test_bot"
)

// ErrTimeout is returned by the Wait methods when the condition did not hold in time.
var ErrTimeout = errors.New("telegramtest: timed out waiting for condition")

// TB is the part of testing.TB that New uses: Close is registered with Cleanup.
type TB interface {
	Cleanup(func())
}

// Option configures a Server.
type Option func(*config)

type config struct {
	clock          Clock
	second         time.Duration
	hookAttempts   int
	hookBackoff    time.Duration
	hookTimeout    time.Duration
	flood          *FloodControl
	bots           [][2]string
	noDefaultBot   bool
	maxUpdateBytes int64
}

// WithClock sets the clock used for message dates, request times and flood control (default:
// the wall clock). Long polls and webhook backoff always use real time.
func WithClock(c Clock) Option { return func(o *config) { o.clock = c } }

// WithSecond sets how long one "second" of getUpdates' timeout lasts (default time.Second), so
// tests can long-poll with timeout=30 and still finish quickly.
func WithSecond(d time.Duration) Option { return func(o *config) { o.second = d } }

// WithWebhookRetry sets how many times an update is POSTed to a webhook that fails (default 3)
// and the pause between attempts (default 20ms). After the last failure the update is dropped
// and recorded as the webhook's last error.
func WithWebhookRetry(attempts int, backoff time.Duration) Option {
	return func(o *config) { o.hookAttempts, o.hookBackoff = attempts, backoff }
}

// WithWebhookTimeout bounds each webhook POST (default 5s).
func WithWebhookTimeout(d time.Duration) Option { return func(o *config) { o.hookTimeout = d } }

// WithFloodControl turns on the rate limiter that answers sends over the limits with 429 (off by
// default; faults can still inject 429s).
func WithFloodControl(fc FloodControl) Option { return func(o *config) { o.flood = &fc } }

// WithBot adds a bot (a profile's token) besides the default one.
func WithBot(token, username string) Option {
	return func(o *config) { o.bots = append(o.bots, [2]string{token, username}) }
}

// WithoutDefaultBot leaves out the bot with DefaultToken.
func WithoutDefaultBot() Option { return func(o *config) { o.noDefaultBot = true } }

// Server is a fake Telegram Bot API on loopback. All its methods are safe for concurrent use.
type Server struct {
	cfg   config
	hs    *httptest.Server
	hook  *http.Client
	flood *floodState

	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	done      <-chan struct{} // ctx.Done()
	closeOnce sync.Once
	workers   sync.WaitGroup

	mu       sync.Mutex
	changed  change.Signal // notified on every state change
	changes  int           // how many times changed was notified
	bots     map[string]*Bot
	first    *Bot
	chats    map[int64]*chat
	requests []*Request
	faults   map[string][]Fault
	sent     map[threadKey][]*SentMessage
	order    []*SentMessage
	actions  []ChatAction
	files    map[string]*File // by file_id
	nextFile int
	answers  []CallbackAnswer
	// nextQuery numbers callback queries.
	nextQuery int
}

type threadKey struct{ chat, thread int64 }

// New starts a fake Bot API on 127.0.0.1 with the default bot (DefaultToken) and the bots of
// WithBot. tb may be nil; when it is not, Close runs at its Cleanup.
func New(tb TB, opts ...Option) *Server {
	cfg := config{
		clock:        RealClock{},
		second:       time.Second,
		hookAttempts: 3,
		hookBackoff:  20 * time.Millisecond,
		hookTimeout:  5 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.hookAttempts < 1 {
		cfg.hookAttempts = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:    cfg,
		ctx:    ctx,
		cancel: cancel,
		done:   ctx.Done(),
		bots:   map[string]*Bot{},
		chats:  map[int64]*chat{},
		faults: map[string][]Fault{},
		sent:   map[threadKey][]*SentMessage{},
		hook:   &http.Client{Timeout: cfg.hookTimeout, Transport: &http.Transport{}},
	}
	if cfg.flood != nil {
		s.flood = newFloodState(*cfg.flood)
	}
	if !cfg.noDefaultBot {
		s.AddBot(DefaultToken, DefaultBotUsername)
	}
	for _, b := range cfg.bots {
		s.AddBot(b[0], b[1])
	}
	s.hs = httptest.NewServer(http.HandlerFunc(s.serve))
	if tb != nil {
		tb.Cleanup(s.Close)
	}
	return s
}

// URL returns the base URL to use in place of https://api.telegram.org (no trailing slash).
func (s *Server) URL() string { return s.hs.URL }

// BotURL returns the method URL prefix for token: URL()+"/bot"+token.
func (s *Server) BotURL(token string) string { return s.hs.URL + "/bot" + token }

// Client returns an HTTP client for the server.
func (s *Server) Client() *http.Client { return s.hs.Client() }

// Close wakes every long poll, stops webhook delivery and shuts the server down.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		s.hs.CloseClientConnections()
		s.hs.Close()
		s.workers.Wait()
		s.hook.CloseIdleConnections()
	})
}

// Clock returns the server's clock.
func (s *Server) Clock() Clock { return s.cfg.clock }

// Bot returns the default bot, or the first added when there is no default.
func (s *Server) Bot() *Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.bots[DefaultToken]; b != nil {
		return b
	}
	return s.first
}

// BotByToken returns the bot with token, or nil.
func (s *Server) BotByToken(token string) *Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bots[token]
}

// AddBot adds a bot with its own identity and update queue; its user id is the token's numeric
// prefix when it has one. Adding an existing token returns the existing bot.
func (s *Server) AddBot(token, username string) *Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.bots[token]; b != nil {
		return b
	}
	id, err := strconv.ParseInt(strings.SplitN(token, ":", 2)[0], 10, 64)
	if err != nil || id <= 0 {
		id = int64(7000000000 + len(s.bots))
	}
	b := &Bot{
		s:     s,
		token: token,
		user: User{ID: id, IsBot: true, FirstName: "Hermes Test " + username, Username: username,
			CanJoinGroups: true},
		nextUpdate: 10000,
	}
	s.bots[token] = b
	if s.first == nil {
		s.first = b
	}
	return b
}

// changedLocked wakes everything waiting for a state change. s.mu must be held.
func (s *Server) changedLocked() {
	s.changes++
	s.changed.Notify()
}

// Wait blocks until cond returns true, re-evaluating it after every change of the fake's state
// (a request, a send, an update injected or confirmed, a webhook attempt). cond runs without
// the server's lock, so it may call any Server or Bot method.
func (s *Server) Wait(timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.WaitContext(ctx, cond)
}

// WaitContext is Wait bounded by ctx; it returns ErrTimeout when ctx ends first.
func (s *Server) WaitContext(ctx context.Context, cond func() bool) error {
	switch err := change.Wait(ctx, &s.mu, &s.changed, s.done, cond); {
	case errors.Is(err, change.ErrClosed):
		return errors.New("telegramtest: server closed")
	case err != nil:
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return nil
}

// Requests returns the recorded requests, oldest first, for method (case-insensitive; "" for
// all) and chat (0 for all).
func (s *Server) Requests(method string, chatID int64) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if (method == "" || strings.EqualFold(r.Method, method)) && (chatID == 0 || r.ChatID == chatID) {
			out = append(out, copyRequest(r))
		}
	}
	return out
}

func copyRequest(r *Request) Request {
	c := *r
	c.Params = make(map[string]string, len(r.Params))
	for k, v := range r.Params {
		c.Params[k] = v
	}
	c.Header = r.Header.Clone()
	c.Files = append([]string(nil), r.Files...)
	c.Uploads = append([]Upload(nil), r.Uploads...)
	return c
}

// WaitRequests waits until at least n finished requests match method and chatID (as in
// Requests) and returns them.
func (s *Server) WaitRequests(method string, chatID int64, n int, timeout time.Duration) ([]Request, error) {
	var got []Request
	err := s.Wait(timeout, func() bool {
		got = got[:0]
		for _, r := range s.Requests(method, chatID) {
			if r.Status != 0 {
				got = append(got, r)
			}
		}
		return len(got) >= n
	})
	return got, err
}

// FirstRequest returns the earliest request for method and chat (as in Requests) that arrived at
// or after since, on the server's clock. It reports false when there is none, so a test can
// assert that nothing was sent before a retry_after elapsed.
func (s *Server) FirstRequest(method string, chatID int64, since time.Time) (Request, bool) {
	for _, r := range s.Requests(method, chatID) {
		if !r.Time.Before(since) {
			return r, true
		}
	}
	return Request{}, false
}

// Sent returns the transcript of (chat, thread): the messages bots sent there, oldest first.
// thread is the message_thread_id the messages went to, 0 for none (a plain chat, or a forum's
// General topic).
func (s *Server) Sent(chatID, thread int64) []SentMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copySent(s.sent[threadKey{chatID, thread}])
}

// SentTexts returns the texts of Sent(chatID, thread).
func (s *Server) SentTexts(chatID, thread int64) []string {
	var out []string
	for _, m := range s.Sent(chatID, thread) {
		out = append(out, m.Message.Text)
	}
	return out
}

// AllSent returns every message sent through the fake, in the order they were accepted.
func (s *Server) AllSent() []SentMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copySent(s.order)
}

func copySent(in []*SentMessage) []SentMessage {
	out := make([]SentMessage, len(in))
	for i, m := range in {
		out[i] = *m
		out[i].Edits = append([]string(nil), m.Edits...)
		if m.File != nil {
			f := *m.File
			out[i].File = &f
		}
	}
	return out
}

// WaitSent waits until the transcript of (chat, thread) holds at least n messages and returns it.
func (s *Server) WaitSent(chatID, thread int64, n int, timeout time.Duration) ([]SentMessage, error) {
	var got []SentMessage
	err := s.Wait(timeout, func() bool {
		got = s.Sent(chatID, thread)
		return len(got) >= n
	})
	return got, err
}

// Actions returns the chat actions sent to chatID (0 for all), oldest first.
func (s *Server) Actions(chatID int64) []ChatAction {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ChatAction
	for _, a := range s.actions {
		if chatID == 0 || a.ChatID == chatID {
			out = append(out, a)
		}
	}
	return out
}

// apiError is a Bot API error answer.
type apiError struct {
	code   int
	desc   string
	params *ResponseParameters
}

// Error returns the description.
func (e *apiError) Error() string { return e.desc }

func badRequest(format string, args ...any) *apiError {
	return &apiError{code: 400, desc: "Bad Request: " + fmt.Sprintf(format, args...)}
}

var (
	errUnauthorized = &apiError{code: 401, desc: "Unauthorized"}
	errNotFound     = &apiError{code: 404, desc: "Not Found"}
)

// envelope is the Bot API's answer.
type envelope struct {
	OK          bool                `json:"ok"`
	Result      any                 `json:"result,omitempty"`
	ErrorCode   int                 `json:"error_code,omitempty"`
	Description string              `json:"description,omitempty"`
	Parameters  *ResponseParameters `json:"parameters,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	writeBody(w, status, body)
}

// writeBody writes a JSON answer and returns its status.
func writeBody(w http.ResponseWriter, status int, body []byte) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
	return status
}

// call is one API request being served.
type call struct {
	ctx    context.Context
	bot    *Bot
	req    *Request
	params map[string]string
}

type handler func(s *Server, c *call) (any, *apiError)

var handlers = map[string]handler{
	"getme":               (*Server).getMe,
	"getupdates":          (*Server).getUpdates,
	"setwebhook":          (*Server).setWebhook,
	"deletewebhook":       (*Server).deleteWebhook,
	"getwebhookinfo":      (*Server).getWebhookInfo,
	"sendmessage":         (*Server).sendMessage,
	"editmessagetext":     (*Server).editMessageText,
	"sendchataction":      (*Server).sendChatAction,
	"getfile":             (*Server).getFile,
	"sendphoto":           (*Server).sendMedia,
	"senddocument":        (*Server).sendMedia,
	"sendvoice":           (*Server).sendMedia,
	"sendaudio":           (*Server).sendMedia,
	"sendvideo":           (*Server).sendMedia,
	"answercallbackquery": (*Server).answerCallbackQuery,
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"); ok {
		s.serveFile(w, r, rest)
		return
	}
	arrived := s.cfg.clock.Now()
	token, method, ok := splitPath(r.URL.Path)
	params, uploads, body, perr := readParams(r)
	var files []string
	for _, u := range uploads {
		files = append(files, u.Field)
	}
	rec := &Request{
		Token: token, Method: method, Params: params, Files: files, Uploads: uploads,
		Header: r.Header.Clone(), Body: body, Time: arrived,
		ChatID: intParam(params, "chat_id"), Thread: intParam(params, "message_thread_id"),
	}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	bot := s.bots[token]
	s.changedLocked()
	s.mu.Unlock()

	status := s.answer(w, r, rec, bot, ok, perr)

	s.mu.Lock()
	rec.Status = status
	s.changedLocked()
	s.mu.Unlock()
}

// answer serves one request and returns the HTTP status written (0 when none was: a reset, or
// no answer at all).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, rec *Request, bot *Bot, pathOK bool, perr error) int {
	if !pathOK {
		return s.fail(w, errNotFound)
	}
	if bot == nil {
		return s.fail(w, errUnauthorized)
	}
	f, faulted := s.takeFault(rec)
	if faulted && !f.after {
		return f.apply(w, nil) // before the effect: nothing happened
	}
	status, body := s.run(r.Context(), bot, rec, perr)
	if !faulted {
		return writeBody(w, status, body)
	}
	switch f.kind {
	case faultDelay:
		if !s.sleep(r.Context(), f.delay) {
			return 0
		}
		return writeBody(w, status, body)
	case faultHang:
		s.sleep(r.Context(), 1<<62)
		return 0
	}
	return f.apply(w, body)
}

// run runs the method and returns the answer it would give: status and JSON envelope.
func (s *Server) run(ctx context.Context, bot *Bot, rec *Request, perr error) (int, []byte) {
	var e *apiError
	var result any
	switch h := handlers[strings.ToLower(rec.Method)]; {
	case perr != nil:
		e = badRequest("%v", perr)
	case h == nil:
		e = errNotFound
	default:
		result, e = h(s, &call{ctx: ctx, bot: bot, req: rec, params: rec.Params})
	}
	if e != nil {
		body, _ := json.Marshal(envelope{ErrorCode: e.code, Description: e.desc, Parameters: e.params})
		return e.code, body
	}
	env := envelope{OK: true, Result: result}
	if d, ok := result.(description); ok {
		env.Result, env.Description = d.result, d.text
	}
	body, _ := json.Marshal(env)
	return http.StatusOK, body
}

// sleep waits d, or less when ctx ends or the server closes; it reports whether d elapsed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

func (s *Server) fail(w http.ResponseWriter, e *apiError) int {
	writeJSON(w, e.code, envelope{ErrorCode: e.code, Description: e.desc, Parameters: e.params})
	return e.code
}

// splitPath parses /bot<TOKEN>/<method>.
func splitPath(p string) (token, method string, ok bool) {
	rest, found := strings.CutPrefix(p, "/bot")
	if !found {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return rest, "", false
	}
	return rest[:i], rest[i+1:], true
}

// meResult is getMe's answer: the bot's User with its capability flags always present, as
// Telegram sends them (false included).
type meResult struct {
	User
	CanJoinGroups           bool `json:"can_join_groups"`
	CanReadAllGroupMessages bool `json:"can_read_all_group_messages"`
	SupportsInlineQueries   bool `json:"supports_inline_queries"`
}

func (s *Server) getMe(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := c.bot.user
	return meResult{User: u, CanJoinGroups: u.CanJoinGroups, CanReadAllGroupMessages: u.CanReadAllGroupMessages,
		SupportsInlineQueries: u.SupportsInlineQueries}, nil
}
