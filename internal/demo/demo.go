// Package demo is the loopback chat the embedded defaults point the echo plugin at: the echo
// plugin POSTs replies to the outbox, and GET shows them. Chat is the same conversation as the
// operator sees it in the console: what they said (Say, through the echo plugin's webhook) and
// what the host sent back. It lets a new user watch the whole flow (webhook in, agent turn,
// background process, notification out) in the browser or with curl.
package demo

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/internal/httpjson"
)

// maxBody caps one posted message.
const maxBody = 1 << 20

// keep is how many messages the outbox keeps.
const keep = 1000

// Outbox is the demo chat's message store.
type Outbox struct {
	// Chat, when set, also gets the messages for its chat (the console shows them).
	Chat *Chat

	mu   sync.Mutex
	msgs []map[string]any
	next int
}

// Register adds POST and GET /demo/outbox to mux.
func (o *Outbox) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /demo/outbox", o.post)
	mux.HandleFunc("GET /demo/outbox", o.list)
}

func (o *Outbox) post(w http.ResponseWriter, r *http.Request) {
	var m map[string]any
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&m); err != nil {
		httpjson.Write(w, http.StatusBadRequest, map[string]any{"ok": false, "error": "bad_json"})
		return
	}
	o.mu.Lock()
	o.next++
	id := o.next
	m["message_id"] = id
	m["at"] = time.Now().UTC().Format(time.RFC3339)
	o.msgs = append(o.msgs, m)
	if len(o.msgs) > keep {
		o.msgs = o.msgs[len(o.msgs)-keep:]
	}
	o.mu.Unlock()
	o.Chat.sent(m)
	httpjson.Write(w, http.StatusOK, map[string]any{"ok": true, "message_id": strconv.Itoa(id)})
}

func (o *Outbox) list(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	out := append([]map[string]any{}, o.msgs...)
	o.mu.Unlock()
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": out})
}
