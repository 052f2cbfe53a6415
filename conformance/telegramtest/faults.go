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
	faultTruncated
	faultHang
)

// Fault is a scripted misbehaviour for one request. Build one with FloodWait, APIError,
// ServerError, MalformedJSON, TruncatedBody, Slow, NoAnswer or ConnectionReset, narrow it with
// ForChat or ForBot, and queue it with Server.InjectFault.
//
// By default a fault replaces the answer before the method runs: nothing happened, which is
// what a client may safely retry. AfterEffect makes it apply after the method took effect (the
// message is posted, then the answer is a 502, a reset or a cut body), which is what a client
// must not retry blindly. Slow and NoAnswer always apply after the effect.
type Fault struct {
	kind   faultKind
	code   int
	desc   string
	params *ResponseParameters
	delay  time.Duration
	chatID int64
	token  string
	after  bool
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

// MalformedJSON answers 200 with a JSON body cut in the middle (a complete HTTP response whose
// body is not JSON). After the effect, the cut body is the first half of the real answer.
func MalformedJSON() Fault { return Fault{kind: faultMalformed} }

// TruncatedBody answers 200 with a Content-Length the body never reaches: the connection is
// closed after half of it, so the client's read of the body fails. After the effect, the half
// sent is the start of the real answer.
func TruncatedBody() Fault { return Fault{kind: faultTruncated} }

// Slow serves the request at once but holds the answer back for d: a client with a shorter
// timeout gives up although its message was accepted (the case that tempts clients into
// duplicate resends). A long poll under Slow collects its updates first, then waits.
func Slow(d time.Duration) Fault { return Fault{kind: faultDelay, delay: d, after: true} }

// NoAnswer serves the request and never answers: the connection stays open until the client
// gives up (or the server closes). It always applies after the effect.
func NoAnswer() Fault { return Fault{kind: faultHang, after: true} }

// ConnectionReset closes the connection with a TCP reset instead of answering.
func ConnectionReset() Fault { return Fault{kind: faultReset} }

// AfterEffect makes the fault apply after the method took effect: a sendMessage is posted (it
// appears in Sent), a getUpdates confirms what its offset confirms, then the client gets the
// fault instead of the answer. Without it a fault answers before the method runs.
func (f Fault) AfterEffect() Fault { f.after = true; return f }

// ForChat narrows the fault to requests whose chat_id is chatID.
func (f Fault) ForChat(chatID int64) Fault { f.chatID = chatID; return f }

// ForBot narrows the fault to requests made with token.
func (f Fault) ForBot(token string) Fault { f.token = token; return f }

// String describes the fault, as recorded in Request.Fault; faults applied after the method
// took effect start with "after effect: ".
func (f Fault) String() string {
	if f.after && f.kind != faultDelay && f.kind != faultHang {
		return "after effect: " + f.describe()
	}
	return f.describe()
}

func (f Fault) describe() string {
	switch f.kind {
	case faultHTML:
		return fmt.Sprintf("html %d", f.code)
	case faultMalformed:
		return "malformed json"
	case faultDelay:
		return "slow " + f.delay.String()
	case faultReset:
		return "connection reset"
	case faultTruncated:
		return "truncated body"
	case faultHang:
		return "no answer"
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

// stubAnswer is the start of a sendMessage answer, cut by MalformedJSON and TruncatedBody when
// they answer before the method ran (there is no real answer to cut).
const stubAnswer = `{"ok":true,"result":{"message_id":1,"date":1700000000,"chat":{"id":1,"type":"private"}}}`

// apply answers the request with the fault and returns the HTTP status written (0 for a reset).
// answer is the JSON the method would have answered (nil when it did not run); the cut-body
// faults send the first half of it. Slow and NoAnswer are handled by Server.answer.
func (f Fault) apply(w http.ResponseWriter, answer []byte) int {
	if answer == nil {
		answer = []byte(stubAnswer)
	}
	half := answer[:len(answer)/2]
	switch f.kind {
	case faultHTML:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.code)
		fmt.Fprintf(w, htmlPage, f.code, http.StatusText(f.code))
		return f.code
	case faultMalformed:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(half)))
		w.WriteHeader(http.StatusOK)
		w.Write(half)
		return http.StatusOK
	case faultTruncated:
		conn := hijack(w)
		if conn == nil {
			return 0
		}
		fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), half)
		conn.Close()
		return http.StatusOK
	case faultReset:
		conn := hijack(w)
		if conn == nil {
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

// hijack takes over the request's connection (nil if it is already gone).
func hijack(w http.ResponseWriter) net.Conn {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return nil
	}
	return conn
}
