package discordtest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/conformance/internal/wire"
)

// Operations faults apply to.
const (
	OpCreate = "create" // POST /channels/{id}/messages
	OpEdit   = "edit"   // PATCH /channels/{id}/messages/{mid}
	OpTyping = "typing" // POST /channels/{id}/typing
)

// Request is one REST request the fake received.
type Request struct {
	Op        string // OpCreate, OpEdit, OpTyping, or "METHOD path" for the others
	Method    string
	Path      string
	ChannelID string
	Status    int    // the status answered (0: the connection was cut, or no answer)
	Fault     string // the fault it took, if any
	Body      []byte
	At        time.Time
}

// RouteLimit is a route bucket's limit: Limit requests per Window.
type RouteLimit struct {
	Limit  int
	Window time.Duration
}

// DefaultRouteLimit is message creation's limit per channel: 5 per 5 s.
func DefaultRouteLimit() RouteLimit { return RouteLimit{Limit: 5, Window: 5 * time.Second} }

type bucket struct {
	used  int
	reset time.Time
}

type faultKind int

const (
	faultRateLimited faultKind = iota
	faultAPIError
	faultHTML
	faultReset
	faultTruncated
	faultNoAnswer
	faultHold
)

// Fault is a scripted misbehaviour for one request of an operation (InjectFault).
type Fault struct {
	kind       faultKind
	after      bool
	status     int
	code       int
	message    string
	retryAfter time.Duration
	global     bool
}

// RateLimited is a 429 for the route's bucket with retry_after d.
func RateLimited(d time.Duration) Fault {
	return Fault{kind: faultRateLimited, status: http.StatusTooManyRequests, retryAfter: d}
}

// GlobalRateLimited is a 429 of the global limit (X-RateLimit-Global: true) with retry_after d.
func GlobalRateLimited(d time.Duration) Fault {
	return Fault{kind: faultRateLimited, status: http.StatusTooManyRequests, retryAfter: d, global: true}
}

// APIError answers status with Discord's JSON error {"code": code, "message": message}
// (403 50013 Missing Permissions, 404 10003 Unknown Channel…).
func APIError(status, code int, message string) Fault {
	return Fault{kind: faultAPIError, status: status, code: code, message: message}
}

// ServerError answers status (502 when 0) with an HTML page, as the front end does.
func ServerError(status int) Fault {
	if status == 0 {
		status = http.StatusBadGateway
	}
	return Fault{kind: faultHTML, status: status}
}

// ConnectionReset closes the connection with a TCP reset instead of answering.
func ConnectionReset() Fault { return Fault{kind: faultReset} }

// Truncated announces the whole answer and sends half of it, then cuts the connection.
func Truncated() Fault { return Fault{kind: faultTruncated} }

// NoAnswer posts the message and never answers.
func NoAnswer() Fault { return Fault{kind: faultNoAnswer, after: true} }

// Hold posts the message and holds the answer until Release.
func Hold() Fault { return Fault{kind: faultHold, after: true} }

// AfterEffect makes f strike after the operation took effect (the message is posted).
func AfterEffect(f Fault) Fault { f.after = true; return f }

// String describes the fault, as recorded in Request.Fault.
func (f Fault) String() string {
	var s string
	switch f.kind {
	case faultRateLimited:
		s = fmt.Sprintf("429 retry_after %v", f.retryAfter)
		if f.global {
			s = "global " + s
		}
	case faultAPIError:
		s = fmt.Sprintf("%d code %d", f.status, f.code)
	case faultHTML:
		s = fmt.Sprintf("html %d", f.status)
	case faultReset:
		s = "connection reset"
	case faultTruncated:
		s = "truncated body"
	case faultNoAnswer:
		return "no answer"
	case faultHold:
		return "held"
	}
	if f.after {
		s = "after effect: " + s
	}
	return s
}

// InjectFault queues faults for op (OpCreate, OpEdit, OpTyping), taken FIFO.
func (s *Server) InjectFault(op string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[op] = append(s.faults[op], faults...)
}

// SetRouteLimit sets message creation's bucket limit for channel ("" for every channel).
func (s *Server) SetRouteLimit(channel string, l RouteLimit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits[channel] = l
	delete(s.buckets, channel)
}

// Release lets every answer held by a Hold fault go.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		close(h)
	}
	s.held = nil
}

// Requests returns the requests for op (every request when op is "").
func (s *Server) Requests(op string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if op == "" || r.Op == op {
			out = append(out, r)
		}
	}
	return out
}

// RateLimitHits counts the requests answered 429 because their bucket (not a fault) was
// exhausted: Discord counts these against the client, and bans an IP that makes too many.
func (s *Server) RateLimitHits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rlHits
}

var (
	apiPath    = regexp.MustCompile(`^/api/v(\d+)(/.*)$`)
	msgsPath   = regexp.MustCompile(`^/channels/(\d+)/messages$`)
	msgPath    = regexp.MustCompile(`^/channels/(\d+)/messages/(\d+)$`)
	typingPath = regexp.MustCompile(`^/channels/(\d+)/typing$`)
	chanPath   = regexp.MustCompile(`^/channels/(\d+)$`)
)

func (s *Server) serveREST(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	m := apiPath.FindStringSubmatch(r.URL.Path)
	req := &Request{Method: r.Method, Path: r.URL.Path, Body: body, At: time.Now()}
	defer func() {
		s.mu.Lock()
		s.requests = append(s.requests, *req)
		s.changedLocked()
		s.mu.Unlock()
	}()
	if m == nil {
		req.Op = r.Method + " " + r.URL.Path
		req.Status = writeError(w, http.StatusNotFound, 0, "404: Not Found")
		return
	}
	path := m[2]
	req.Op = r.Method + " " + path
	if r.Header.Get("Authorization") != "Bot "+s.token {
		req.Status = writeError(w, http.StatusUnauthorized, 0, "401: Unauthorized")
		return
	}
	switch {
	case r.Method == "GET" && (path == "/gateway" || path == "/gateway/bot"):
		req.Status = writeJSON(w, 200, map[string]any{"url": strings.TrimSuffix(s.GatewayURL(), "/"), "shards": 1,
			"session_start_limit": map[string]any{"total": 1000, "remaining": 999, "reset_after": 14400000, "max_concurrency": 1}})
	case r.Method == "GET" && path == "/users/@me":
		req.Status = writeJSON(w, 200, s.bot)
	case r.Method == "GET" && chanPath.MatchString(path):
		id := chanPath.FindStringSubmatch(path)[1]
		s.mu.Lock()
		ch := s.channels[id]
		s.mu.Unlock()
		if ch == nil {
			req.Status = writeError(w, 404, 10003, "Unknown Channel")
			return
		}
		req.Status = writeJSON(w, 200, channelJSON(ch))
	case r.Method == "POST" && msgsPath.MatchString(path):
		req.Op, req.ChannelID = OpCreate, msgsPath.FindStringSubmatch(path)[1]
		s.create(w, r, req)
	case r.Method == "PATCH" && msgPath.MatchString(path):
		sm := msgPath.FindStringSubmatch(path)
		req.Op, req.ChannelID = OpEdit, sm[1]
		s.edit(w, r, req, sm[2])
	case r.Method == "POST" && typingPath.MatchString(path):
		req.Op, req.ChannelID = OpTyping, typingPath.FindStringSubmatch(path)[1]
		if f, ok := s.takeFault(req); ok && !f.after {
			req.Status = s.apply(f, w, r, nil)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		req.Status = http.StatusNoContent
	default:
		req.Status = writeError(w, http.StatusNotFound, 0, "404: Not Found")
	}
}

// createParams are the fields of a message creation the fake reads.
type createParams struct {
	Content          string          `json:"content"`
	AllowedMentions  json.RawMessage `json:"allowed_mentions"`
	Nonce            json.RawMessage `json:"nonce"`
	EnforceNonce     bool            `json:"enforce_nonce"`
	MessageReference *struct {
		MessageID       string `json:"message_id"`
		FailIfNotExists *bool  `json:"fail_if_not_exists"`
	} `json:"message_reference"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, req *Request) {
	f, faulted := s.takeFault(req)
	if faulted && !f.after {
		req.Status = s.apply(f, w, r, nil)
		return
	}
	// The route's bucket (faults do not spend it).
	s.mu.Lock()
	hdr, wait, ok := s.spendLocked(req.ChannelID)
	if !ok {
		s.rlHits++
		s.mu.Unlock()
		for k, v := range hdr {
			w.Header()[k] = v
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		w.Header().Set("X-RateLimit-Scope", "user")
		req.Status = writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": round3(wait.Seconds()), "global": false})
		return
	}
	s.mu.Unlock()
	for k, v := range hdr {
		w.Header()[k] = v
	}
	var p createParams
	if err := json.Unmarshal(req.Body, &p); err != nil {
		req.Status = writeError(w, 400, 50109, "The request body contains invalid JSON.")
		return
	}
	s.mu.Lock()
	ch := s.channels[req.ChannelID]
	switch {
	case ch == nil:
		s.mu.Unlock()
		req.Status = writeError(w, 404, 10003, "Unknown Channel")
		return
	case strings.TrimSpace(p.Content) == "":
		s.mu.Unlock()
		req.Status = writeError(w, 400, 50006, "Cannot send an empty message")
		return
	case utf8.RuneCountInString(p.Content) > MaxContent:
		s.mu.Unlock()
		req.Status = writeJSON(w, 400, map[string]any{"code": 50035, "message": "Invalid Form Body",
			"errors": map[string]any{"content": map[string]any{"_errors": []any{map[string]any{"code": "BASE_TYPE_MAX_LENGTH",
				"message": fmt.Sprintf("Must be %d or fewer in length.", MaxContent)}}}}})
		return
	}
	nonce := strings.Trim(string(p.Nonce), `"`)
	if p.EnforceNonce && nonce != "" {
		for _, m := range s.messages {
			if m.Nonce == nonce && m.ChannelID == req.ChannelID && m.Author.ID == s.bot.ID && time.Since(m.At) < 2*time.Minute {
				out := s.messageJSONLocked(m)
				s.mu.Unlock()
				req.Status = writeJSON(w, 200, out)
				return
			}
		}
	}
	msg := &Message{ID: s.snowflakeLocked(), ChannelID: ch.ID, GuildID: ch.GuildID, Author: s.bot, Content: p.Content,
		AllowedMentions: p.AllowedMentions, Nonce: nonce, At: time.Now()}
	if ref := p.MessageReference; ref != nil && ref.MessageID != "" {
		found := slices.ContainsFunc(s.messages, func(m *Message) bool { return m.ID == ref.MessageID && m.ChannelID == ch.ID })
		if !found && (ref.FailIfNotExists == nil || *ref.FailIfNotExists) {
			s.mu.Unlock()
			req.Status = writeJSON(w, 400, map[string]any{"code": 50035, "message": "Invalid Form Body",
				"errors": map[string]any{"message_reference": map[string]any{"_errors": []any{map[string]any{
					"code": "REPLIES_UNKNOWN_MESSAGE", "message": "Unknown message"}}}}})
			return
		}
		if found {
			msg.ReplyTo = ref.MessageID
		}
	}
	msg.Pinged = s.pingsLocked(p.Content, p.AllowedMentions)
	s.messages = append(s.messages, msg)
	out := s.messageJSONLocked(msg)
	s.dispatchLocked("MESSAGE_CREATE", out)
	s.mu.Unlock()
	s.answer(w, r, req, faulted, f, out)
}

// answer writes the answer of an operation that took effect, or the fault striking after it.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, req *Request, faulted bool, f Fault, out any) {
	body, _ := json.Marshal(out)
	if faulted {
		if f.kind == faultHold {
			if !s.hold(r) {
				return
			}
		} else {
			req.Status = s.apply(f, w, r, body)
			return
		}
	}
	req.Status = writeRaw(w, 200, body)
}

func (s *Server) edit(w http.ResponseWriter, r *http.Request, req *Request, id string) {
	f, faulted := s.takeFault(req)
	if faulted && !f.after {
		req.Status = s.apply(f, w, r, nil)
		return
	}
	var p createParams
	if err := json.Unmarshal(req.Body, &p); err != nil {
		req.Status = writeError(w, 400, 50109, "The request body contains invalid JSON.")
		return
	}
	s.mu.Lock()
	var msg *Message
	for _, m := range s.messages {
		if m.ID == id && m.ChannelID == req.ChannelID {
			msg = m
		}
	}
	switch {
	case msg == nil:
		s.mu.Unlock()
		req.Status = writeError(w, 404, 10008, "Unknown Message")
		return
	case msg.Author.ID != s.bot.ID:
		s.mu.Unlock()
		req.Status = writeError(w, 403, 50005, "Cannot edit a message authored by another user")
		return
	case utf8.RuneCountInString(p.Content) > MaxContent || strings.TrimSpace(p.Content) == "":
		s.mu.Unlock()
		req.Status = writeError(w, 400, 50035, "Invalid Form Body")
		return
	}
	msg.Content, msg.AllowedMentions = p.Content, p.AllowedMentions
	msg.Edits++
	msg.Pinged = s.pingsLocked(p.Content, p.AllowedMentions)
	out := s.messageJSONLocked(msg)
	s.dispatchLocked("MESSAGE_UPDATE", out)
	s.mu.Unlock()
	s.answer(w, r, req, faulted, f, out)
}

// spendLocked takes a request from channel's message bucket: the headers to answer with, and
// when it is exhausted how long until it resets.
func (s *Server) spendLocked(channel string) (http.Header, time.Duration, bool) {
	l, ok := s.limits[channel]
	if !ok {
		l = s.limits[""]
	}
	now := time.Now()
	b := s.buckets[channel]
	if b == nil || !now.Before(b.reset) {
		b = &bucket{reset: now.Add(l.Window)}
		s.buckets[channel] = b
	}
	left := b.reset.Sub(now)
	h := http.Header{}
	h.Set("X-RateLimit-Limit", strconv.Itoa(l.Limit))
	h.Set("X-RateLimit-Bucket", "msgs-"+channel[max(len(channel)-6, 0):])
	h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(b.reset.UnixMilli())/1000, 'f', 3, 64))
	h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(round3(left.Seconds()), 'f', 3, 64))
	if b.used >= l.Limit {
		h.Set("X-RateLimit-Remaining", "0")
		return h, left, false
	}
	b.used++
	h.Set("X-RateLimit-Remaining", strconv.Itoa(l.Limit-b.used))
	return h, 0, true
}

func round3(f float64) float64 { return math.Ceil(f*1000) / 1000 }

func (s *Server) takeFault(req *Request) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.faults[req.Op]
	if len(q) == 0 {
		return Fault{}, false
	}
	f := q[0]
	s.faults[req.Op] = q[1:]
	req.Fault = f.String()
	return f, true
}

const htmlPage = `<html><head><title>%d %s</title></head><body><center><h1>%d %s</h1></center><hr><center>cloudflare</center></body></html>`

// apply writes a fault's answer and returns the status written (0: cut or none).
func (s *Server) apply(f Fault, w http.ResponseWriter, r *http.Request, body []byte) int {
	switch f.kind {
	case faultRateLimited:
		secs := round3(f.retryAfter.Seconds())
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(secs))))
		if f.global {
			w.Header().Set("X-RateLimit-Global", "true")
			w.Header().Set("X-RateLimit-Scope", "global")
		} else {
			w.Header().Set("X-RateLimit-Scope", "user")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(secs, 'f', 3, 64))
		}
		return writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": secs, "global": f.global})
	case faultAPIError:
		return writeError(w, f.status, f.code, f.message)
	case faultHTML:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, htmlPage, f.status, http.StatusText(f.status), f.status, http.StatusText(f.status))
		return f.status
	case faultReset:
		wire.Reset(w)
		return 0
	case faultTruncated:
		if len(body) == 0 {
			body = []byte(`{"id": "0", "content": "nothing"}`)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(200)
		w.Write(body[:len(body)/2])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		panic(http.ErrAbortHandler)
	case faultNoAnswer:
		select {
		case <-r.Context().Done():
		case <-s.ctx.Done():
		}
	}
	return 0
}

func (s *Server) hold(r *http.Request) bool {
	ch := make(chan struct{})
	s.mu.Lock()
	s.held = append(s.held, ch)
	s.changedLocked()
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-r.Context().Done():
	case <-s.ctx.Done():
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	b, _ := json.Marshal(v)
	return writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
	return status
}

func writeError(w http.ResponseWriter, status, code int, message string) int {
	return writeJSON(w, status, map[string]any{"code": code, "message": message})
}
