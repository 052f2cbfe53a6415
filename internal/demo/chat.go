package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Message is one message of the demo chat, as the person in it sees it: something they said, or
// something the host sent them.
type Message struct {
	Seq        int64     `json:"seq"` // position in the chat, from 1
	At         time.Time `json:"at"`
	FromHost   bool      `json:"from_host"` // false: the operator said it
	ChatID     string    `json:"chat_id"`
	Text       string    `json:"text"`
	Part       int       `json:"part,omitempty"` // of a message the host split (1-based)
	Parts      int       `json:"parts,omitempty"`
	DeliveryID string    `json:"delivery_id,omitempty"` // the ledger row the host sent it as
	// Via says how a message the operator did not type in the console came in: "/demo/inbox".
	Via string `json:"via,omitempty"`
	// UserID is who said it, when not the chat's own user.
	UserID string `json:"user_id,omitempty"`
}

// sayKey marks a request of Say's: the inbox does not record it again.
type sayKey struct{}

// keepChat is how many messages the chat keeps.
const keepChat = 1000

// Chat is the demo conversation: what the operator said through Say, and what the host posted to
// the outbox (the Outbox adds those). Readers follow it with Since.
type Chat struct {
	// Hook serves the demo profile's webhook (the plugin's webhook export, then the inbound
	// door): Say posts through it, so the operator's messages take the platform's own path.
	Hook http.Handler
	// ChatID and UserID are who the operator is on the demo platform.
	ChatID, UserID string

	n     atomic.Int64 // platform message ids of Say
	epoch string       // names this Chat (see Epoch)
	once  sync.Once

	mu      sync.Mutex
	msgs    []Message
	next    int64
	changed chan struct{} // closed (and replaced) when a message is added
}

// Say posts text into the chat as the operator. It returns once the host has recorded the
// message (the webhook's answer), or with the reason it refused it.
func (c *Chat) Say(ctx context.Context, text string) error {
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("demo: empty message")
	}
	id := fmt.Sprintf("op-%d-%d", time.Now().UnixNano(), c.n.Add(1))
	body, _ := json.Marshal(map[string]string{"id": id, "chat_id": c.ChatID, "user_id": c.UserID, "text": text})
	req, err := http.NewRequestWithContext(context.WithValue(ctx, sayKey{}, true), http.MethodPost, "/demo/say", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	// Recorded before the webhook runs: the reply may arrive before the webhook answers.
	seq := c.add(Message{ChatID: c.ChatID, Text: text})
	var rec answer
	c.Hook.ServeHTTP(&rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK // as net/http answers a handler that writes nothing
	}
	if rec.status/100 != 2 {
		c.remove(seq)
		return fmt.Errorf("demo: the platform refused the message (%d): %s", rec.status, strings.TrimSpace(rec.body.String()))
	}
	return nil
}

// Epoch names this chat's numbering: the chat lives in memory, so a restarted host numbers its
// messages from 1 again under another epoch, and a reader that knew the old one starts over.
func (c *Chat) Epoch() string {
	c.once.Do(func() {
		var b [6]byte
		rand.Read(b[:])
		c.epoch = hex.EncodeToString(b[:])
	})
	return c.epoch
}

// heard records a message posted to the inbox (a webhook body: id, chat_id, user_id, text) if
// it is for this chat, and returns its seq (0: not recorded).
func (c *Chat) heard(body []byte) int64 {
	var m struct {
		ChatID string `json:"chat_id"`
		UserID string `json:"user_id"`
		Text   string `json:"text"`
	}
	if json.Unmarshal(body, &m) != nil || m.ChatID != c.ChatID || strings.TrimSpace(m.Text) == "" {
		return 0
	}
	user := m.UserID
	if user == c.UserID {
		user = ""
	}
	return c.add(Message{ChatID: c.ChatID, Text: m.Text, Via: "/demo/inbox", UserID: user})
}

// Since returns the messages after seq (oldest first, at most the ones kept), and a channel
// that is closed when a newer message is added.
func (c *Chat) Since(seq int64) ([]Message, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	i := len(c.msgs)
	for i > 0 && c.msgs[i-1].Seq > seq {
		i--
	}
	return append([]Message(nil), c.msgs[i:]...), c.changed
}

// add appends m (numbered and timed) and wakes the readers.
func (c *Chat) add(m Message) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	m.Seq, m.At = c.next, time.Now().UTC()
	c.msgs = append(c.msgs, m)
	if len(c.msgs) > keepChat {
		c.msgs = append(c.msgs[:0:0], c.msgs[len(c.msgs)-keepChat:]...)
	}
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
	return m.Seq
}

// remove takes back a message the platform refused.
func (c *Chat) remove(seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.msgs {
		if m.Seq == seq {
			c.msgs = append(c.msgs[:i:i], c.msgs[i+1:]...)
			break
		}
	}
}

// sent records a message the host posted to the outbox, if it is for this chat.
func (c *Chat) sent(m map[string]any) {
	if c == nil {
		return
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	num := func(k string) int { f, _ := m[k].(float64); return int(f) }
	if str("chat_id") != c.ChatID {
		return
	}
	c.add(Message{FromHost: true, ChatID: c.ChatID, Text: str("text"), Part: num("part"), Parts: num("parts"),
		DeliveryID: str("delivery_id")})
}

// answer records the webhook's answer to Say.
type answer struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (a *answer) Header() http.Header {
	if a.h == nil {
		a.h = http.Header{}
	}
	return a.h
}

func (a *answer) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
}

func (a *answer) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	if a.body.Len() < 4096 {
		a.body.Write(b[:min(len(b), 4096-a.body.Len())])
	}
	return len(b), nil
}
