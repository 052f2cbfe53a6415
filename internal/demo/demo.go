// Package demo is the loopback demo platform the embedded defaults set up: one profile of the
// echo plugin, served only on the admin listener. The operator posts a message to /demo/inbox
// (with the admin token) or types it in the console's chat; the host hands it to the echo
// plugin's webhook with the demo secret, and from there it takes the path of any inbound message
// (the door, a turn, the agent). The echo plugin POSTs its replies to /demo/outbox with the same
// secret, and GET /demo/outbox shows them; Chat is the same conversation as the console shows it.
// It lets a new user watch the whole flow (webhook in, agent turn, background process,
// notification out) in the browser or with curl.
package demo

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/internal/httpjson"
)

// SecretHeader carries the demo secret between the host and the echo plugin.
const SecretHeader = "X-Echo-Secret"

// Limits of the outbox: one message, all messages kept, and one listing.
const (
	MaxMessage = 64 << 10
	MaxBytes   = 4 << 20
	MaxList    = 1000
)

// Outbox is the demo chat's message store, bounded in bytes (the oldest messages go first).
type Outbox struct {
	// Secret must accompany every POST (SecretHeader): only the demo profile's plugin posts here.
	Secret string
	// Chat, when set, also gets the messages for its chat (the console shows them).
	Chat *Chat

	mu    sync.Mutex
	msgs  []stored
	bytes int
	next  int
}

type stored struct {
	raw  json.RawMessage // the message as the plugin sent it, with the id and time added
	size int
}

// Register adds POST and GET /demo/outbox to mux. The mux is the admin listener's: GET needs
// the admin token there, POST the demo secret.
func (o *Outbox) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /demo/outbox", o.post)
	mux.HandleFunc("GET /demo/outbox", o.list)
}

// IsPluginPost reports a request the admin listener lets through without the admin token: the
// plugin's own POST to the outbox, which carries the demo secret instead (checked by the outbox).
func IsPluginPost(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/demo/outbox"
}

func (o *Outbox) post(w http.ResponseWriter, r *http.Request) {
	if o.Secret == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get(SecretHeader)), []byte(o.Secret)) != 1 {
		httpjson.Write(w, http.StatusUnauthorized, map[string]any{"ok": false, "error": "bad_secret"})
		return
	}
	var m map[string]any
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxMessage)).Decode(&m); err != nil {
		httpjson.Write(w, http.StatusBadRequest, map[string]any{"ok": false, "error": "bad_json"})
		return
	}
	o.mu.Lock()
	o.next++
	id := o.next
	m["message_id"] = id
	m["at"] = time.Now().UTC().Format(time.RFC3339)
	raw, _ := json.Marshal(m)
	o.msgs = append(o.msgs, stored{raw: raw, size: len(raw)})
	o.bytes += len(raw)
	for o.bytes > MaxBytes && len(o.msgs) > 1 {
		o.bytes -= o.msgs[0].size
		o.msgs[0] = stored{}
		o.msgs = o.msgs[1:]
	}
	o.mu.Unlock()
	o.Chat.sent(m)
	httpjson.Write(w, http.StatusOK, map[string]any{"ok": true, "message_id": strconv.Itoa(id)})
}

// list answers the newest messages, oldest first: ?limit=N (default 100, at most MaxList).
func (o *Outbox) list(w http.ResponseWriter, r *http.Request) {
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxList)
	o.mu.Lock()
	start := max(0, len(o.msgs)-limit)
	out := make([]json.RawMessage, 0, len(o.msgs)-start)
	for _, m := range o.msgs[start:] {
		out = append(out, m.raw)
	}
	o.mu.Unlock()
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": out})
}

// Inbox is POST /demo/inbox: a message from the operator into the demo chat, handed to the demo
// profile's webhook with the demo secret.
type Inbox struct {
	Hook            http.Handler // the webhook handler (webhook.Handler)
	Plugin, Profile string
	Secret          string
	// Chat, when set, also gets the messages posted here for its chat (with curl, say), so the
	// console shows the whole conversation whichever way a message came in.
	Chat *Chat
}

// maxInbox is the most of a posted message the inbox reads to show it in the chat (the webhook
// has its own, larger cap).
const maxInbox = 1 << 20

// Register adds POST /demo/inbox to mux.
func (in *Inbox) Register(mux *http.ServeMux) { mux.Handle("POST /demo/inbox", in) }

func (in *Inbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r2 := r.Clone(r.Context())
	r2.SetPathValue("plugin", in.Plugin)
	r2.SetPathValue("profile", in.Profile)
	r2.Header.Set(SecretHeader, in.Secret)
	r2.Header.Del("Authorization") // the admin token stays with the host
	var seq int64
	if in.Chat != nil && r.Context().Value(sayKey{}) == nil { // Say records its own
		body, err := io.ReadAll(io.LimitReader(r.Body, maxInbox+1))
		r2.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		if err == nil && len(body) <= maxInbox {
			seq = in.Chat.heard(body)
		}
	}
	sw := &statusWriter{ResponseWriter: w}
	in.Hook.ServeHTTP(sw, r2)
	if seq != 0 && sw.status != 0 && sw.status/100 != 2 { // 0: nothing written, which net/http answers 200
		in.Chat.remove(seq) // refused: not part of the conversation
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
	s.ResponseWriter.WriteHeader(status)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}
