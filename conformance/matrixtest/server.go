package matrixtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hermes-host/hermes-host/conformance/internal/change"
)

// Defaults every Server starts with.
const (
	DefaultServerName = "hermes.test"
	DefaultBotUserID  = "@hermes:hermes.test"
	DefaultBotName    = "Hermes"
	DefaultBotToken   = "syt_aGVybWVz_hermestestbottoken_0aBcDe"
	DefaultDeviceID   = "HERMESDEV"
	// DefaultTimelineLimit is the most events one room's timeline carries in one sync.
	DefaultTimelineLimit = 10
	maxSyncWait          = 30 * time.Second
	// MaxEventSize is the most content bytes the server takes in one event (Matrix caps a whole
	// event at 64 KiB).
	MaxEventSize = 65000
)

// Endpoints, the names faults and requests are recorded under.
const (
	EndpointWhoami   = "whoami"
	EndpointProfile  = "profile"
	EndpointSync     = "sync"
	EndpointSend     = "send"
	EndpointTyping   = "typing"
	EndpointJoin     = "join"
	EndpointMessages = "messages"
)

// ErrTimeout is returned by Wait when the condition did not hold in time.
var ErrTimeout = errors.New("matrixtest: timed out waiting for condition")

// TB is the part of testing.TB that New uses: Close is registered with Cleanup.
type TB interface{ Cleanup(func()) }

// User is an account on the server.
type User struct {
	ID, Name, Token string
}

// Event is one event of a room's stream, as the server stores it.
type Event struct {
	Pos      int            // position on the server's stream (sync tokens are "s<Pos>")
	ID       string         // $...
	RoomID   string         //
	Type     string         // m.room.message, m.room.member, ...
	Sender   string         //
	StateKey *string        // set for state events
	Content  map[string]any //
	TS       int64          // origin_server_ts, ms
	TxnID    string         // the sender's transaction id (send only)
	Token    string         // the access token it was sent with (send only)
}

// Body is the event's content.body ("" when absent).
func (e *Event) Body() string { s, _ := e.Content["body"].(string); return s }

// Request is one request the server received, as it answered it.
type Request struct {
	Endpoint string
	Method   string
	Path     string
	Token    string
	Room     string
	Txn      string // send: the transaction id
	Since    string // sync: the since token ("" for an initial sync)
	Timeout  int    // sync: the timeout parameter, ms
	Body     []byte
	Status   int    // 0 when the connection was cut or never answered
	Errcode  string // the errcode answered, if any
	Fault    string // the fault applied, if any
	Dedup    bool   // send: answered from the transaction cache, nothing posted
	EventID  string // send: the event id answered
	Time     time.Time
}

// Server is a fake homeserver.
type Server struct {
	hs     *httptest.Server
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	changed  change.Signal
	users    map[string]*User // by token
	byID     map[string]*User
	expired  map[string]bool
	rooms    map[string]*Room
	events   []*Event
	txns     map[string]string // token + " " + path -> event id
	faults   map[string][]Fault
	held     []chan struct{}
	requests []Request
	limit    int
	tag      string // makes event ids unique across servers of one process
}

var servers atomic.Int64

// Option configures a Server.
type Option func(*Server)

// WithTimelineLimit sets the server's most events per room timeline in one sync (default
// DefaultTimelineLimit): a filter asking for more gets this many.
func WithTimelineLimit(n int) Option { return func(s *Server) { s.limit = n } }

// New starts a server with the bot (DefaultBotUserID, DefaultBotToken). With tb, it is closed
// at tb.Cleanup.
func New(tb TB, opts ...Option) *Server {
	s := &Server{users: map[string]*User{}, byID: map[string]*User{}, expired: map[string]bool{},
		rooms: map[string]*Room{}, txns: map[string]string{}, faults: map[string][]Fault{}, limit: DefaultTimelineLimit}
	for _, o := range opts {
		o(s)
	}
	s.tag = "hs" + strconv.FormatInt(servers.Add(1), 36) + "_"
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.addUser(DefaultBotUserID, DefaultBotName, DefaultBotToken)
	s.hs = httptest.NewServer(http.HandlerFunc(s.serve))
	if tb != nil {
		tb.Cleanup(s.Close)
	}
	return s
}

// Close stops the server; waiting syncs and held answers end.
func (s *Server) Close() {
	s.cancel()
	s.hs.CloseClientConnections()
	s.hs.Close()
}

// URL is the homeserver's base URL (http://127.0.0.1:port), the client's homeserver.
func (s *Server) URL() string { return s.hs.URL }

// Client is an HTTP client for the server.
func (s *Server) Client() *http.Client { return s.hs.Client() }

// BotID is the bot's user id.
func (s *Server) BotID() string { return DefaultBotUserID }

// AddUser creates a user with a token of its own and returns its id.
func (s *Server) AddUser(id, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addUser(id, name, "syt_"+strings.Trim(strings.NewReplacer("@", "", ":", "_", ".", "_").Replace(id), "_")+"_token")
	return id
}

func (s *Server) addUser(id, name, token string) {
	u := &User{ID: id, Name: name, Token: token}
	s.users[token], s.byID[id] = u, u
}

// TokenOf returns a user's access token.
func (s *Server) TokenOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.byID[id]; u != nil {
		return u.Token
	}
	return ""
}

// ExpireToken makes token unknown: every request with it is answered 401 M_UNKNOWN_TOKEN.
func (s *Server) ExpireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expired[token] = true
}

// RestoreToken undoes ExpireToken.
func (s *Server) RestoreToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.expired, token)
}

// SetTimelineLimit changes the server's timeline limit (see WithTimelineLimit).
func (s *Server) SetTimelineLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = n
}

// Wait blocks until cond holds (checked after every change on the server) or timeout passes.
func (s *Server) Wait(timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch err := change.Wait(ctx, &s.mu, &s.changed, s.ctx.Done(), cond); {
	case errors.Is(err, change.ErrClosed):
		return errors.New("matrixtest: server closed")
	case err != nil:
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return nil
}

// WaitSyncing waits until token has made a sync with a since token (the client is past its
// initial sync: what is said from now on reaches it as new events).
func (s *Server) WaitSyncing(token string, timeout time.Duration) error {
	return s.Wait(timeout, func() bool {
		for _, r := range s.Requests(EndpointSync) {
			if r.Token == token && r.Since != "" {
				return true
			}
		}
		return false
	})
}

// Requests returns the requests received for endpoint ("" for all), in order. A request is
// recorded when it arrives and updated when answered.
func (s *Server) Requests(endpoint string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if endpoint == "" || r.Endpoint == endpoint {
			out = append(out, r)
		}
	}
	return out
}

// Events returns every event of room, in stream order.
func (s *Server) Events(room string) []*Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Event
	for _, e := range s.events {
		if e.RoomID == room {
			out = append(out, e)
		}
	}
	return out
}

// Position is the stream's current position: the sync token "s<Position>" covers every event.
func (s *Server) Position() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
}

// changedLocked wakes waiters. s.mu must be held.
func (s *Server) changedLocked() { s.changed.Notify() }

// appendLocked adds an event to the stream. s.mu must be held.
func (s *Server) appendLocked(e *Event) *Event {
	e.Pos = len(s.events) + 1
	e.ID = fmt.Sprintf("$%sev%06d", s.tag, e.Pos)
	e.TS = time.Now().UnixMilli()
	if e.Content == nil {
		e.Content = map[string]any{}
	}
	s.events = append(s.events, e)
	if r := s.rooms[e.RoomID]; r != nil && e.Type == "m.room.member" && e.StateKey != nil {
		m, _ := e.Content["membership"].(string)
		r.members[*e.StateKey] = m
	}
	if r := s.rooms[e.RoomID]; r != nil && e.Type == "m.room.encryption" {
		r.encrypted = true
	}
	s.changedLocked()
	return e
}

// --- HTTP ---

type matrixError struct {
	status  int
	errcode string
	msg     string
	extra   map[string]any
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/_matrix/client/versions":
		writeJSON(w, 200, map[string]any{"versions": []string{"v1.1", "v1.11", "v1.12"}})
		return
	case !strings.HasPrefix(p, "/_matrix/client/v3/"):
		writeJSON(w, 404, errBody("M_UNRECOGNIZED", "Unrecognized request"))
		return
	}
	seg := strings.Split(strings.TrimPrefix(p, "/_matrix/client/v3/"), "/")
	for i := range seg {
		seg[i], _ = url.PathUnescape(seg[i])
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	req := Request{Method: r.Method, Path: r.URL.EscapedPath(), Body: body, Time: time.Now(), Token: tokenOf(r)}
	var handle func(*Request) (int, any)
	switch {
	case len(seg) == 2 && seg[0] == "account" && seg[1] == "whoami" && r.Method == "GET":
		req.Endpoint, handle = EndpointWhoami, s.whoami
	case len(seg) >= 2 && seg[0] == "profile" && r.Method == "GET":
		req.Endpoint, handle = EndpointProfile, func(q *Request) (int, any) { return s.profile(q, seg[1]) }
	case len(seg) == 1 && seg[0] == "sync" && r.Method == "GET":
		req.Endpoint = EndpointSync
		req.Since = r.URL.Query().Get("since")
		req.Timeout, _ = strconv.Atoi(r.URL.Query().Get("timeout"))
		filter := r.URL.Query().Get("filter")
		handle = func(q *Request) (int, any) { return s.sync(r.Context(), q, filter) }
	case len(seg) == 5 && seg[0] == "rooms" && seg[2] == "send" && r.Method == "PUT":
		req.Endpoint, req.Room, req.Txn = EndpointSend, seg[1], seg[4]
		handle = func(q *Request) (int, any) { return s.send(q, seg[3]) }
	case len(seg) == 4 && seg[0] == "rooms" && seg[2] == "typing" && r.Method == "PUT":
		req.Endpoint, req.Room = EndpointTyping, seg[1]
		handle = func(q *Request) (int, any) { return s.typing(q, seg[3]) }
	case (len(seg) == 2 && seg[0] == "join" || len(seg) == 3 && seg[0] == "rooms" && seg[2] == "join") && r.Method == "POST":
		req.Endpoint, req.Room = EndpointJoin, seg[1] // join/{room} and rooms/{room}/join alike
		handle = s.join
	case len(seg) == 3 && seg[0] == "rooms" && seg[2] == "messages" && r.Method == "GET":
		req.Endpoint, req.Room = EndpointMessages, seg[1]
		q := r.URL.Query()
		handle = func(rq *Request) (int, any) { return s.messages(rq, q) }
	default:
		writeJSON(w, 404, errBody("M_UNRECOGNIZED", "Unrecognized request"))
		return
	}

	s.mu.Lock()
	idx := len(s.requests)
	s.requests = append(s.requests, req)
	s.changedLocked()
	s.mu.Unlock()
	finish := func(status int, errcode string) {
		s.mu.Lock()
		s.requests[idx].Status, s.requests[idx].Errcode = status, errcode
		s.requests[idx].Fault, s.requests[idx].Dedup, s.requests[idx].EventID = req.Fault, req.Dedup, req.EventID
		s.changedLocked()
		s.mu.Unlock()
	}

	if me := s.auth(&req); me != nil {
		writeJSON(w, me.status, errMap(me))
		finish(me.status, me.errcode)
		return
	}
	f, faulted := s.takeFault(&req)
	if faulted && !f.after {
		finish(s.apply(f, w, r, nil), f.errcode)
		return
	}
	status, out := handle(&req)
	b, _ := json.Marshal(out)
	errcode := ""
	if me, ok := out.(*matrixError); ok {
		b, _ = json.Marshal(errMap(me))
		errcode = me.errcode
		if me.status == http.StatusTooManyRequests {
			if ms, ok := me.extra["retry_after_ms"].(int64); ok {
				w.Header().Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
			}
		}
	}
	if faulted {
		switch f.kind {
		case faultSlow:
			if !s.sleep(r.Context(), f.delay) {
				finish(0, "")
				return
			}
		case faultHold:
			if !s.hold(r) {
				finish(0, "")
				return
			}
		default:
			finish(s.apply(f, w, r, b), f.errcode)
			return
		}
	}
	writeRaw(w, status, b)
	finish(status, errcode)
}

func tokenOf(r *http.Request) string {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return strings.TrimPrefix(h, "Bearer ")
	}
	return r.URL.Query().Get("access_token")
}

func (s *Server) auth(req *Request) *matrixError {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case req.Token == "":
		return &matrixError{status: 401, errcode: "M_MISSING_TOKEN", msg: "Missing access token"}
	case s.users[req.Token] == nil || s.expired[req.Token]:
		return &matrixError{status: 401, errcode: "M_UNKNOWN_TOKEN", msg: "Invalid access token passed.", extra: map[string]any{"soft_logout": false}}
	}
	return nil
}

func (s *Server) user(token string) *User {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.users[token]
}

func (s *Server) whoami(req *Request) (int, any) {
	u := s.user(req.Token)
	return 200, map[string]any{"user_id": u.ID, "device_id": DefaultDeviceID, "is_guest": false}
}

func (s *Server) profile(_ *Request, id string) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.byID[id]
	if u == nil {
		return 404, &matrixError{status: 404, errcode: "M_NOT_FOUND", msg: "Profile was not found"}
	}
	return 200, map[string]any{"displayname": u.Name}
}

func (s *Server) typing(req *Request, userID string) (int, any) {
	u := s.user(req.Token)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rooms[req.Room]
	switch {
	case userID != u.ID:
		return 403, &matrixError{status: 403, errcode: "M_FORBIDDEN", msg: "Cannot set another user's typing state"}
	case r == nil || r.members[u.ID] != "join":
		return 403, &matrixError{status: 403, errcode: "M_FORBIDDEN", msg: "User " + u.ID + " not in room " + req.Room}
	}
	var body struct {
		Typing  bool  `json:"typing"`
		Timeout int64 `json:"timeout"`
	}
	if json.Unmarshal(req.Body, &body) != nil {
		return 400, &matrixError{status: 400, errcode: "M_NOT_JSON", msg: "Content not JSON."}
	}
	r.typing = append(r.typing, body.Typing)
	s.changedLocked()
	return 200, map[string]any{}
}

func (s *Server) join(req *Request) (int, any) {
	u := s.user(req.Token)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rooms[req.Room]
	if r == nil {
		return 404, &matrixError{status: 404, errcode: "M_NOT_FOUND", msg: "No known servers"}
	}
	if m := r.members[u.ID]; m != "invite" && m != "join" {
		return 403, &matrixError{status: 403, errcode: "M_FORBIDDEN", msg: "You are not invited to this room."}
	}
	if r.members[u.ID] != "join" {
		key := u.ID
		s.appendLocked(&Event{RoomID: r.ID, Type: "m.room.member", Sender: u.ID, StateKey: &key,
			Content: map[string]any{"membership": "join", "displayname": u.Name}})
	}
	return 200, map[string]any{"room_id": r.ID}
}

func (s *Server) send(req *Request, evType string) (int, any) {
	u := s.user(req.Token)
	var content map[string]any
	if err := json.Unmarshal(req.Body, &content); err != nil || content == nil {
		return 400, &matrixError{status: 400, errcode: "M_NOT_JSON", msg: "Content not JSON."}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Idempotency: the same transaction id on the same path with the same access token answers
	// the first event's id and posts nothing (Synapse keys its cache so).
	key := req.Token + " " + req.Path
	if id, ok := s.txns[key]; ok {
		req.Dedup, req.EventID = true, id
		return 200, map[string]any{"event_id": id}
	}
	r := s.rooms[req.Room]
	if r == nil || r.members[u.ID] != "join" {
		return 403, &matrixError{status: 403, errcode: "M_FORBIDDEN", msg: "User " + u.ID + " not in room " + req.Room}
	}
	if len(req.Body) > MaxEventSize {
		return 413, &matrixError{status: 413, errcode: "M_TOO_LARGE", msg: "event too large"}
	}
	e := s.appendLocked(&Event{RoomID: r.ID, Type: evType, Sender: u.ID, Content: content, TxnID: req.Txn, Token: req.Token})
	s.txns[key] = e.ID
	req.EventID = e.ID
	return 200, map[string]any{"event_id": e.ID}
}

// --- helpers ---

func errBody(code, msg string) map[string]any { return map[string]any{"errcode": code, "error": msg} }

func errMap(e *matrixError) map[string]any {
	m := errBody(e.errcode, e.msg)
	for k, v := range e.extra {
		m[k] = v
	}
	return m
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// sleep waits d, or less when ctx ends or the server closes; it reports whether d elapsed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
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

func token(pos int) string { return "s" + strconv.Itoa(pos) }

// parseToken reads "s<N>" (ok false for anything else).
func parseToken(t string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(t, "s"))
	return n, err == nil && strings.HasPrefix(t, "s") && n >= 0
}
