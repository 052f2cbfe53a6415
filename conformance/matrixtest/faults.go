package matrixtest

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hermes-host/hermes-host/conformance/internal/wire"
)

type faultKind int

const (
	faultLimit faultKind = iota
	faultError
	faultHTML
	faultReset
	faultTruncated
	faultNoAnswer
	faultSlow
	faultHold
)

// Fault is a scripted misbehaviour for one request. Build one with LimitExceeded, Error,
// ServerError, ConnectionReset, Truncated, NoAnswer, Slow or Hold; by default it replaces the
// request (nothing happens), and AfterEffect makes it strike after the request took effect (the
// message is posted, then the answer goes wrong). Narrow it with ForRoom and queue it with
// Server.InjectFault.
type Fault struct {
	kind    faultKind
	after   bool
	status  int
	errcode string
	retryMs int64
	delay   time.Duration
	room    string
}

// LimitExceeded is 429 {"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":ms} with Retry-After in
// seconds (rounded up), as Synapse answers.
func LimitExceeded(ms int64) Fault {
	return Fault{kind: faultLimit, status: http.StatusTooManyRequests, errcode: "M_LIMIT_EXCEEDED", retryMs: ms}
}

// Error is a Matrix error answer: status with {"errcode": errcode}.
func Error(status int, errcode string) Fault {
	return Fault{kind: faultError, status: status, errcode: errcode}
}

// ServerError answers status (502 when 0) with an HTML page, as a reverse proxy in front of a
// homeserver does.
func ServerError(status int) Fault {
	if status == 0 {
		status = http.StatusBadGateway
	}
	return Fault{kind: faultHTML, status: status}
}

// ConnectionReset closes the connection with a TCP reset instead of answering.
func ConnectionReset() Fault { return Fault{kind: faultReset} }

// Truncated announces the whole answer and sends only half of it, then cuts the connection.
func Truncated() Fault { return Fault{kind: faultTruncated} }

// NoAnswer never answers (after the effect): the request stays open until the client gives up.
func NoAnswer() Fault { return Fault{kind: faultNoAnswer, after: true} }

// Slow serves the request at once and holds the answer back for d.
func Slow(d time.Duration) Fault { return Fault{kind: faultSlow, after: true, delay: d} }

// Hold serves the request at once and holds the answer until Server.Release.
func Hold() Fault { return Fault{kind: faultHold, after: true} }

// AfterEffect makes f strike after the request took effect.
func AfterEffect(f Fault) Fault { f.after = true; return f }

// ForRoom narrows the fault to requests for room id.
func (f Fault) ForRoom(id string) Fault { f.room = id; return f }

// String describes the fault, as recorded in Request.Fault.
func (f Fault) String() string {
	var s string
	switch f.kind {
	case faultLimit:
		s = fmt.Sprintf("429 M_LIMIT_EXCEEDED retry_after_ms %d", f.retryMs)
	case faultError:
		s = fmt.Sprintf("%d %s", f.status, f.errcode)
	case faultHTML:
		s = fmt.Sprintf("html %d", f.status)
	case faultReset:
		s = "connection reset"
	case faultTruncated:
		s = "truncated body"
	case faultNoAnswer:
		return "no answer"
	case faultSlow:
		return "slow " + f.delay.String()
	case faultHold:
		return "held"
	}
	if f.after {
		s = "after effect: " + s
	}
	return s
}

// InjectFault queues faults for endpoint (EndpointSend, EndpointSync, ...). Each request takes
// the first queued fault that matches it, in FIFO order.
func (s *Server) InjectFault(endpoint string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[endpoint] = append(s.faults[endpoint], faults...)
}

// PendingFaults returns how many faults are still queued for endpoint.
func (s *Server) PendingFaults(endpoint string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.faults[endpoint])
}

// Held is the number of answers a Hold fault is holding now (a held send was posted before it
// is counted here).
func (s *Server) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
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

func (s *Server) takeFault(r *Request) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.faults[r.Endpoint]
	for i, f := range q {
		if f.room == "" || f.room == r.Room {
			s.faults[r.Endpoint] = append(q[:i:i], q[i+1:]...)
			r.Fault = f.String()
			return f, true
		}
	}
	return Fault{}, false
}

const htmlPage = `<html><head><title>%d %s</title></head><body><center><h1>%d %s</h1></center><hr><center>nginx</center></body></html>`

// apply writes the fault's answer in place of (or after) the request's and returns the status
// written (0 when the connection was cut or nothing was answered).
func (s *Server) apply(f Fault, w http.ResponseWriter, r *http.Request, body []byte) int {
	switch f.kind {
	case faultLimit:
		w.Header().Set("Retry-After", strconv.FormatInt((f.retryMs+999)/1000, 10))
		writeJSON(w, f.status, map[string]any{"errcode": f.errcode, "error": "Too Many Requests", "retry_after_ms": f.retryMs})
		return f.status
	case faultError:
		writeJSON(w, f.status, errBody(f.errcode, "scripted error"))
		return f.status
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
			body = []byte(`{"event_id":"$truncated"}`)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
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
	return false
}
