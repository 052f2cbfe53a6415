package telegramtest

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type faultKind int

const (
	faultAPI faultKind = iota
	faultHTML
	faultMalformed
	faultDelay
	faultReset
)

// Fault is a scripted misbehaviour for one request. Build one with FloodWait, APIError,
// ServerError, MalformedJSON, Slow or ConnectionReset, narrow it with ForChat or ForBot, and
// queue it with Server.InjectFault.
type Fault struct {
	kind   faultKind
	code   int
	desc   string
	params *ResponseParameters
	delay  time.Duration
	chatID int64
	token  string
}

// FloodWait is a 429 "Too Many Requests: retry after N" with parameters.retry_after N.
func FloodWait(seconds int) Fault {
	return Fault{kind: faultAPI, code: 429, desc: "Too Many Requests: retry after " + strconv.Itoa(seconds),
		params: &ResponseParameters{RetryAfter: seconds}}
}

// APIError is an arbitrary Bot API error answer: HTTP status code, error_code code, and
// description (for example 403, "Forbidden: bot was blocked by the user").
func APIError(code int, description string) Fault {
	return Fault{kind: faultAPI, code: code, desc: description}
}

// Migrated is the 400 answer for a group upgraded to the supergroup to.
func Migrated(to int64) Fault {
	return Fault{kind: faultAPI, code: 400, desc: "Bad Request: group chat was upgraded to a supergroup chat",
		params: &ResponseParameters{MigrateToChatID: to}}
}

// ServerError answers with status (502 when 0) and an nginx-style HTML page instead of JSON, as
// Telegram's front end does when the backend is down.
func ServerError(status int) Fault {
	if status == 0 {
		status = http.StatusBadGateway
	}
	return Fault{kind: faultHTML, code: status}
}

// MalformedJSON answers 200 with a truncated JSON body.
func MalformedJSON() Fault { return Fault{kind: faultMalformed} }

// Slow serves the request at once but holds the answer back for d: a client with a shorter
// timeout gives up although its message was accepted (the case that tempts clients into
// duplicate resends). A long poll under Slow collects its updates first, then waits.
func Slow(d time.Duration) Fault { return Fault{kind: faultDelay, delay: d} }

// ConnectionReset closes the connection with a TCP reset instead of answering.
func ConnectionReset() Fault { return Fault{kind: faultReset} }

// ForChat narrows the fault to requests whose chat_id is chatID.
func (f Fault) ForChat(chatID int64) Fault { f.chatID = chatID; return f }

// ForBot narrows the fault to requests made with token.
func (f Fault) ForBot(token string) Fault { f.token = token; return f }

// String describes the fault, as recorded in Request.Fault.
func (f Fault) String() string {
	switch f.kind {
	case faultHTML:
		return fmt.Sprintf("html %d", f.code)
	case faultMalformed:
		return "malformed json"
	case faultDelay:
		return "slow " + f.delay.String()
	case faultReset:
		return "connection reset"
	}
	return fmt.Sprintf("%d %s", f.code, f.desc)
}

// InjectFault queues faults for method (case-insensitive; "*" for any method). Each request
// takes the first queued fault that matches it (by method, then ForChat and ForBot), in FIFO
// order; faults for the method itself are tried before "*" ones.
func (s *Server) InjectFault(method string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := strings.ToLower(method)
	s.faults[m] = append(s.faults[m], faults...)
}

// PendingFaults returns how many faults are still queued for method ("*" for the wildcard queue).
func (s *Server) PendingFaults(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.faults[strings.ToLower(method)])
}

// takeFault dequeues the first fault matching r and notes it in r.Fault.
func (s *Server) takeFault(r *Request) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range []string{strings.ToLower(r.Method), "*"} {
		q := s.faults[m]
		for i, f := range q {
			if (f.chatID == 0 || f.chatID == r.ChatID) && (f.token == "" || f.token == r.Token) {
				s.faults[m] = append(q[:i:i], q[i+1:]...)
				r.Fault = f.String()
				return f, true
			}
		}
	}
	return Fault{}, false
}

const htmlPage = `<html>
<head><title>%[1]d %[2]s</title></head>
<body>
<center><h1>%[1]d %[2]s</h1></center>
<hr><center>nginx/1.18.0</center>
</body>
</html>
`

// apply answers the request with the fault and returns the HTTP status written (0 for a reset).
// It is not used for Slow, which Server.answer handles.
func (f Fault) apply(w http.ResponseWriter) int {
	switch f.kind {
	case faultHTML:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.code)
		fmt.Fprintf(w, htmlPage, f.code, http.StatusText(f.code))
		return f.code
	case faultMalformed:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"ok":true,"result":{"message_id":`))
		return http.StatusOK
	case faultReset:
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic(http.ErrAbortHandler)
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			return 0
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // close with RST
		}
		conn.Close()
		return 0
	}
	writeJSON(w, f.code, envelope{ErrorCode: f.code, Description: f.desc, Parameters: f.params})
	return f.code
}
