package slacktest

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/conformance/internal/wire"
)

type faultKind int

const (
	faultRateLimited faultKind = iota
	faultSlackError
	faultHTML
	faultReset
	faultTruncated
	faultMalformed
	faultNoAnswer
	faultSlow
	faultHold
)

// Fault is a scripted misbehaviour for one Web API request. Build one with RateLimited, Error,
// ServerError, ConnectionReset, Truncated, Malformed, NoAnswer, Slow or Hold; by default it
// replaces the method (nothing happens), and AfterEffect makes it apply after the method took
// effect (the message is posted, then the answer goes wrong). Narrow it with ForChannel and
// queue it with Server.InjectFault.
type Fault struct {
	kind       faultKind
	after      bool
	status     int
	code       string
	retryAfter string
	delay      time.Duration
	channel    string
}

// RateLimited is HTTP 429 with Retry-After: seconds and {"ok":false,"error":"ratelimited"}.
func RateLimited(seconds int) Fault {
	return Fault{kind: faultRateLimited, status: http.StatusTooManyRequests, code: "ratelimited", retryAfter: strconv.Itoa(seconds)}
}

// RateLimitedHeader is a 429 whose Retry-After header is value verbatim (e.g. a malformed one).
func RateLimitedHeader(value string) Fault {
	return Fault{kind: faultRateLimited, status: http.StatusTooManyRequests, code: "ratelimited", retryAfter: value}
}

// Error is the method's HTTP 200 {"ok":false,"error":code} answer (channel_not_found,
// invalid_auth, fatal_error...).
func Error(code string) Fault { return Fault{kind: faultSlackError, status: http.StatusOK, code: code} }

// ServerError answers status (503 when 0) with an HTML page, as Slack's front end does.
func ServerError(status int) Fault {
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	return Fault{kind: faultHTML, status: status}
}

// ConnectionReset closes the connection with a TCP reset instead of answering.
func ConnectionReset() Fault { return Fault{kind: faultReset} }

// Truncated announces the whole answer (Content-Length) and sends only its first half, then cuts
// the connection.
func Truncated() Fault { return Fault{kind: faultTruncated} }

// Malformed answers 200 with a body that is not JSON.
func Malformed() Fault { return Fault{kind: faultMalformed} }

// NoAnswer never answers: the request stays open until the client gives up or the server
// closes.
func NoAnswer() Fault { return Fault{kind: faultNoAnswer, after: true} }

// Slow serves the request at once and holds the answer back for d: a client with a shorter
// timeout gives up although its message was posted.
func Slow(d time.Duration) Fault { return Fault{kind: faultSlow, after: true, delay: d} }

// Hold serves the request at once and holds the answer until Server.Release (or the client
// gives up): a test decides exactly when a slow send finishes.
func Hold() Fault { return Fault{kind: faultHold, after: true} }

// AfterEffect makes f apply after the method took effect: chat.postMessage posts the message,
// then answers with f (a 5xx, a reset, a truncated or malformed body).
func AfterEffect(f Fault) Fault { f.after = true; return f }

// ForChannel narrows the fault to requests whose channel (or channel_id) is id.
func (f Fault) ForChannel(id string) Fault { f.channel = id; return f }

// WithStatus answers a RateLimited or Error fault with HTTP status instead of its own (429 or
// 200), the Web API body unchanged: Error("service_unavailable").WithStatus(503) is a 503 whose
// body says what Slack did not do, RateLimited(1).WithStatus(200) an HTTP 200
// {"ok":false,"error":"ratelimited"} with Retry-After.
func (f Fault) WithStatus(status int) Fault { f.status = status; return f }

// WithRetryAfter adds "Retry-After: seconds" to a RateLimited or Error fault's answer (Slack
// sends it with ratelimited whatever the status).
func (f Fault) WithRetryAfter(seconds int) Fault { f.retryAfter = strconv.Itoa(seconds); return f }

// String describes the fault, as recorded in Request.Fault.
func (f Fault) String() string {
	var s string
	switch f.kind {
	case faultRateLimited:
		s = fmt.Sprintf("%d ratelimited retry-after %s", f.status, f.retryAfter)
	case faultSlackError:
		s = "error " + f.code
		if f.status != http.StatusOK {
			s += fmt.Sprintf(" (HTTP %d)", f.status)
		}
		if f.retryAfter != "" {
			s += " retry-after " + f.retryAfter
		}
	case faultHTML:
		s = fmt.Sprintf("html %d", f.status)
	case faultReset:
		s = "connection reset"
	case faultTruncated:
		s = "truncated body"
	case faultMalformed:
		s = "malformed body"
	case faultNoAnswer:
		s = "no answer"
	case faultSlow:
		s = "slow " + f.delay.String()
	case faultHold:
		s = "held"
	}
	if f.after && f.kind != faultNoAnswer && f.kind != faultSlow && f.kind != faultHold {
		s = "after effect: " + s
	}
	return s
}

// InjectFault queues faults for method (e.g. "chat.postMessage"; "*" for any method). Each
// request takes the first queued fault that matches it (by method, then ForChannel), in FIFO
// order; faults for the method itself are tried before "*" ones.
func (s *Server) InjectFault(method string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[method] = append(s.faults[method], faults...)
}

// PendingFaults returns how many faults are still queued for method.
func (s *Server) PendingFaults(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.faults[method])
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

// Held returns how many answers are held by Hold faults right now.
func (s *Server) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// takeFault dequeues the first fault matching r. s.mu must not be held.
func (s *Server) takeFault(r *Request) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := r.Params["channel"]
	if ch == "" {
		ch = r.Params["channel_id"]
	}
	for _, m := range []string{r.Method, "*"} {
		q := s.faults[m]
		for i, f := range q {
			if f.channel == "" || f.channel == ch {
				s.faults[m] = append(q[:i:i], q[i+1:]...)
				r.Fault = f.String()
				return f, true
			}
		}
	}
	return Fault{}, false
}

const htmlPage = `<!DOCTYPE html>
<html><head><title>Slack is having trouble</title></head>
<body><h1>%d %s</h1><p>Slack is experiencing some trouble. Please try again.</p></body></html>
`

// apply writes the fault's answer in place of (or after) the method's body and returns the
// status written (0 when the connection was cut or nothing was answered). body is the answer the
// method produced, for faults that mangle it.
func (s *Server) apply(f Fault, w http.ResponseWriter, r *http.Request, body []byte) int {
	switch f.kind {
	case faultRateLimited:
		w.Header().Set("Retry-After", f.retryAfter)
		writeRaw(w, f.status, marshal(apiResponse{"ok": false, "error": f.code}))
		return f.status
	case faultSlackError:
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		writeRaw(w, f.status, marshal(apiResponse{"ok": false, "error": f.code}))
		return f.status
	case faultHTML:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, htmlPage, f.status, http.StatusText(f.status))
		return f.status
	case faultReset:
		wire.Reset(w)
		return 0
	case faultTruncated:
		if len(body) == 0 {
			body = marshal(apiResponse{"ok": true})
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		w.Write(body[:len(body)/2])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		panic(http.ErrAbortHandler) // cut the connection mid-body
	case faultMalformed:
		writeRaw(w, http.StatusOK, []byte(`<html><body>upstream answered nonsense</body></html>`))
		return http.StatusOK
	case faultNoAnswer:
		select {
		case <-r.Context().Done():
		case <-s.ctx.Done():
		}
		return 0
	}
	return 0
}

// hold parks an answer until Release, the client leaving or the server closing; it reports
// whether the answer should still be written.
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
	s.mu.Lock()
	for i, h := range s.held {
		if h == ch {
			s.held = append(s.held[:i:i], s.held[i+1:]...)
			break
		}
	}
	s.changedLocked()
	s.mu.Unlock()
	return false
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// RateLimits is the per-channel limiter on chat.postMessage: Slack allows about one message a
// second per channel, with short bursts.
type RateLimits struct {
	Burst int           // messages a channel accepts at once (default 3)
	Every time.Duration // one more message per Every (default 1s)
}

// DefaultRateLimits is Slack's documented "about 1 per second, bursts allowed".
func DefaultRateLimits() RateLimits { return RateLimits{Burst: 3, Every: time.Second} }

type limiter struct {
	l       RateLimits
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(l RateLimits) *limiter {
	if l.Burst <= 0 {
		l.Burst = 3
	}
	if l.Every <= 0 {
		l.Every = time.Second
	}
	return &limiter{l: l, buckets: map[string]*bucket{}}
}

// take spends a token of key's bucket at now, or returns how long until one is available.
func (l *limiter) take(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: float64(l.l.Burst), at: now}
		l.buckets[key] = b
	}
	if el := now.Sub(b.at); el > 0 {
		b.tokens = math.Min(float64(l.l.Burst), b.tokens+float64(el)/float64(l.l.Every))
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) * float64(l.l.Every)), false
}
