// Package echotest is a loopback fake of the echo platform (plugins/echo): an outbox the plugin
// POSTs messages to and an inbox it polls. Tests use it to watch what a host really sent, to
// inject failures (429 with retry_after, 5xx, a hang), and to feed inbound messages.
package echotest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Message is one message as the echo plugin sends it.
type Message struct {
	ChatType   string `json:"chat_type,omitempty"`
	ChatID     string `json:"chat_id"`
	ThreadID   string `json:"thread_id,omitempty"`
	UserID     string `json:"user_id,omitempty"`
	Text       string `json:"text"`
	ReplyTo    string `json:"reply_to,omitempty"`
	Part       int    `json:"part,omitempty"`
	Parts      int    `json:"parts,omitempty"`
	DeliveryID string `json:"delivery_id,omitempty"`
	// Attachments are the files the message carries (one at most from the host), their bytes
	// in data: URLs (Attachment.Bytes).
	Attachments []Attachment `json:"attachments,omitempty"`
	At          time.Time    `json:"-"`
}

// Attachment is a file on the echo platform's wire, in either direction.
type Attachment struct {
	Kind     string `json:"kind"`
	Name     string `json:"name,omitempty"`
	MIMEType string `json:"mime_type,omitempty"`
	Size     int64  `json:"size,omitempty"`
	URL      string `json:"url"` // data:<mime>;base64,<bytes>
	Caption  string `json:"caption,omitempty"`
}

// DataURL is data as the data: URL the echo plugin decodes.
func DataURL(mime string, data []byte) string {
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(data)
}

// Bytes decodes the attachment's base64 data: URL.
func (a Attachment) Bytes() ([]byte, error) {
	_, payload, ok := strings.Cut(a.URL, ";base64,")
	if !ok || !strings.HasPrefix(a.URL, "data:") {
		return nil, fmt.Errorf("echotest: %q is not a base64 data: URL", a.URL)
	}
	return base64.StdEncoding.DecodeString(payload)
}

// Inbound is a message for the host to poll from the inbox.
type Inbound struct {
	ID       string `json:"id"`
	ChatType string `json:"chat_type,omitempty"`
	ChatID   string `json:"chat_id"`
	ThreadID string `json:"thread_id,omitempty"`
	UserID   string `json:"user_id,omitempty"`
	Text     string `json:"text"`
	// Attachments, each with its bytes in a data: URL (DataURL), the plugin's fetch decodes.
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Server is the fake. Its zero value is not usable; call New.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	cond     *sync.Cond
	got      []Message
	attempts map[string]int // delivery id → POSTs received, accepted or not
	faults   []Fault
	inbox    []Inbound
	hang     chan struct{}
	throttle bool // every POST answers 429 retry_after=1 until turned off
}

// Fault is a scripted answer to the next outbox POST.
type Fault struct {
	Status     int // 429, 500, 400…
	RetryAfter int // seconds, for 429
	Hang       bool
	// Delay accepts the message but answers only after this long.
	Delay time.Duration
	// Cut accepts the message and closes the connection without an answer: the sender cannot
	// know whether it arrived (an uncertain send).
	Cut bool
}

// New starts the fake on loopback.
func New() *Server {
	s := &Server{attempts: map[string]int{}, hang: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /outbox", s.outbox)
	mux.HandleFunc("GET /inbox", s.inboxHandler)
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is the fake's base URL; the plugin's config uses URL()+"/outbox" and URL()+"/inbox".
func (s *Server) URL() string { return s.srv.URL }

// Close stops the fake (releasing any hung request).
func (s *Server) Close() {
	s.ReleaseHung()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// ReleaseHung lets requests held by a Hang fault end without an answer (the client sees the
// connection close).
func (s *Server) ReleaseHung() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.hang:
	default:
		close(s.hang)
	}
}

// Fail scripts the answers to the next outbox POSTs.
func (s *Server) Fail(f ...Fault) {
	s.mu.Lock()
	s.faults = append(s.faults, f...)
	s.mu.Unlock()
}

// Throttle makes every outbox POST answer 429 with retry_after 1 s while on: the host's lane for
// the chat stays blocked (without holding the chat's session boundary) until it is turned off.
func (s *Server) Throttle(on bool) {
	s.mu.Lock()
	s.throttle = on
	s.mu.Unlock()
}

// Push queues an inbound message for the host's next poll.
func (s *Server) Push(m Inbound) {
	s.mu.Lock()
	s.inbox = append(s.inbox, m)
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *Server) outbox(w http.ResponseWriter, r *http.Request) {
	var m Message
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		w.WriteHeader(400)
		w.Write([]byte(`{"ok":false,"error":"bad_json"}`))
		return
	}
	m.At = time.Now()
	s.mu.Lock()
	s.attempts[m.DeliveryID]++
	s.cond.Broadcast()
	var f Fault
	if len(s.faults) > 0 {
		f, s.faults = s.faults[0], s.faults[1:]
	}
	if s.throttle {
		f = Fault{Status: 429, RetryAfter: 1}
	}
	if f.Hang {
		hang := s.hang
		s.mu.Unlock()
		select { // never answers: the host is expected to die meanwhile
		case <-hang:
		case <-r.Context().Done():
		}
		return
	}
	switch {
	case f.Status == 429:
		s.mu.Unlock()
		w.WriteHeader(429)
		fmt.Fprintf(w, `{"ok":false,"error":"rate_limited","retry_after":%d}`, f.RetryAfter)
		return
	case f.Status >= 400:
		s.mu.Unlock()
		w.WriteHeader(f.Status)
		w.Write([]byte(`<html><body>error</body></html>`))
		return
	}
	s.got = append(s.got, m)
	id := len(s.got)
	s.cond.Broadcast()
	s.mu.Unlock()
	if f.Cut {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	time.Sleep(f.Delay)
	json.NewEncoder(w).Encode(map[string]any{"ok": true, "message_id": strconv.Itoa(id)})
}

func (s *Server) inboxHandler(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	wait, _ := strconv.Atoi(r.URL.Query().Get("wait_ms"))
	deadline := time.Now().Add(time.Duration(min(wait, 5000)) * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var out []Inbound
		cursor := after
		for i, m := range s.inbox {
			if c := strconv.Itoa(i + 1); after == "" || i+1 > atoi(after) {
				out = append(out, m)
				cursor = c
			}
		}
		if len(out) > 0 || time.Now().After(deadline) {
			json.NewEncoder(w).Encode(map[string]any{"messages": out, "cursor": cursor})
			return
		}
		t := time.AfterFunc(time.Until(deadline), func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
		s.cond.Wait()
		t.Stop()
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// Messages returns what the platform accepted, in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.got...)
}

// Accepted returns how many messages the platform accepted: len(Messages()) without the copy,
// for loops that wait for a number of them.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// Attempts reports how many POSTs carried delivery id (accepted or not).
func (s *Server) Attempts(deliveryID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts[deliveryID]
}

// Wait blocks until some accepted message satisfies match, or timeout passes.
func (s *Server) Wait(timeout time.Duration, match func(Message) bool) (Message, bool) {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer t.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; ; {
		for ; i < len(s.got); i++ {
			if match(s.got[i]) {
				return s.got[i], true
			}
		}
		if time.Now().After(deadline) {
			return Message{}, false
		}
		s.cond.Wait()
	}
}

// WaitAttempt blocks until one more outbox POST (accepted or not) arrives, or timeout passes.
func (s *Server) WaitAttempt(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer t.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.attempts {
		n += c
	}
	start := n
	for n == start {
		if time.Now().After(deadline) {
			return false
		}
		s.cond.Wait()
		n = 0
		for _, c := range s.attempts {
			n += c
		}
	}
	return true
}

// Count counts accepted messages whose text contains sub.
func (s *Server) Count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.got {
		if strings.Contains(m.Text, sub) {
			n++
		}
	}
	return n
}

// Has returns a matcher for Wait: the text contains sub.
func Has(sub string) func(Message) bool {
	return func(m Message) bool { return strings.Contains(m.Text, sub) }
}
