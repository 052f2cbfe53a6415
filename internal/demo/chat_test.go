package demo

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestChat: what the operator says goes to the hook as the platform's message; what the host
// posts to the outbox for the chat follows it, in order; readers are woken; a refused message
// is taken back.
func TestChat(t *testing.T) {
	var got []map[string]string
	refuse := false
	c := &Chat{ChatID: "42", UserID: "me", Hook: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		json.NewDecoder(r.Body).Decode(&m)
		got = append(got, m)
		if refuse {
			http.Error(w, "bad secret", http.StatusUnauthorized)
		}
	})}
	o := &Outbox{Chat: c, Secret: "s3"}
	mux := http.NewServeMux()
	o.Register(mux)
	post := func(body string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/demo/outbox", strings.NewReader(body))
		req.Header.Set(SecretHeader, "s3")
		mux.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("outbox: %d", rec.Code)
		}
	}

	_, woken := c.Since(0)
	if err := c.Say(context.Background(), "run sleep 1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(time.Second):
		t.Fatal("a reader was not woken")
	}
	if len(got) != 1 || got[0]["chat_id"] != "42" || got[0]["user_id"] != "me" || got[0]["text"] != "run sleep 1" || got[0]["id"] == "" {
		t.Fatalf("the platform got %+v", got)
	}
	post(`{"chat_id":"42","text":"Started","part":1,"parts":2,"delivery_id":"dlv_1"}`)
	post(`{"chat_id":"7","text":"another chat"}`)
	post(`{"chat_id":"42","text":"finished"}`)

	msgs, _ := c.Since(0)
	var lines []string
	for _, m := range msgs {
		lines = append(lines, m.Text)
	}
	if strings.Join(lines, "|") != "run sleep 1|Started|finished" || msgs[0].FromHost || !msgs[1].FromHost ||
		msgs[1].Part != 1 || msgs[1].Parts != 2 || msgs[1].DeliveryID != "dlv_1" {
		t.Fatalf("the chat: %+v", msgs)
	}
	if later, _ := c.Since(msgs[1].Seq); len(later) != 1 || later[0].Text != "finished" {
		t.Fatalf("since %d: %+v", msgs[1].Seq, later)
	}

	refuse = true
	err := c.Say(context.Background(), "refused")
	if err == nil || !strings.Contains(err.Error(), "bad secret") {
		t.Fatalf("a refused message: %v", err)
	}
	if after, _ := c.Since(msgs[2].Seq); len(after) != 0 {
		t.Fatalf("a refused message stayed in the chat: %+v", after)
	}
	if err := c.Say(context.Background(), "  "); err == nil || len(got) != 2 {
		t.Fatalf("an empty message: %v, %d posts", err, len(got))
	}
}

// TestChatKeepsTheNewest: the chat is bounded.
func TestChatKeepsTheNewest(t *testing.T) {
	c := &Chat{ChatID: "1"}
	for i := 0; i < keepChat+10; i++ {
		c.sent(map[string]any{"chat_id": "1", "text": "m"})
	}
	msgs, _ := c.Since(0)
	if len(msgs) != keepChat || msgs[0].Seq != 11 {
		t.Fatalf("%d messages from %d", len(msgs), msgs[0].Seq)
	}
}

// TestInboxShowsInTheChat: a message posted to /demo/inbox (curl) for the chat is in the chat,
// marked as come in through the inbox; one for another chat is not; one the platform refuses is
// taken back; Say through the same inbox is recorded once.
func TestInboxShowsInTheChat(t *testing.T) {
	refuse := false
	var hooked []string
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		json.NewDecoder(r.Body).Decode(&m)
		hooked = append(hooked, m["text"])
		if r.Header.Get(SecretHeader) != "s3" || refuse {
			http.Error(w, "refused", http.StatusUnauthorized)
		}
	})
	in := &Inbox{Hook: hook, Plugin: "echo", Profile: "main", Secret: "s3"}
	c := &Chat{ChatID: "42", UserID: "me", Hook: in}
	in.Chat = c
	post := func(body string) int {
		rec := httptest.NewRecorder()
		in.ServeHTTP(rec, httptest.NewRequest("POST", "/demo/inbox", strings.NewReader(body)))
		return rec.Code
	}
	if code := post(`{"id":"1","chat_id":"42","user_id":"me","text":"help"}`); code != 200 {
		t.Fatalf("inbox: %d", code)
	}
	post(`{"id":"2","chat_id":"7","user_id":"x","text":"elsewhere"}`)
	post(`{"id":"3","chat_id":"42","user_id":"friend","text":"from a friend"}`)
	refuse = true
	if code := post(`{"id":"4","chat_id":"42","user_id":"me","text":"refused"}`); code != http.StatusUnauthorized {
		t.Fatalf("a refused post: %d", code)
	}
	refuse = false
	if err := c.Say(context.Background(), "typed in the console"); err != nil {
		t.Fatal(err)
	}
	msgs, _ := c.Since(0)
	var lines []string
	for _, m := range msgs {
		lines = append(lines, m.Text+"/"+m.Via+"/"+m.UserID)
	}
	if got := strings.Join(lines, "|"); got != "help//demo/inbox/|from a friend//demo/inbox/friend|typed in the console//" {
		t.Fatalf("the chat: %s", got)
	}
	if strings.Join(hooked, "|") != "help|elsewhere|from a friend|refused|typed in the console" {
		t.Fatalf("the platform got %q: every body must reach it whole", hooked)
	}
	if c.Epoch() == "" || c.Epoch() != c.Epoch() || (&Chat{}).Epoch() == c.Epoch() {
		t.Fatal("epochs")
	}
}
