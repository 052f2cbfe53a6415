package telegramtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// receiver is a webhook endpoint that answers with a script of statuses (then 200) and records
// what it got.
type receiver struct {
	mu      sync.Mutex
	script  []int
	updates []Update
	secrets []string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var u Update
	json.Unmarshal(body, &u)
	rc.mu.Lock()
	rc.updates = append(rc.updates, u)
	rc.secrets = append(rc.secrets, strings.Join(r.Header.Values(SecretHeader), "|"))
	status := 200
	if len(rc.script) > 0 {
		status, rc.script = rc.script[0], rc.script[1:]
	}
	rc.mu.Unlock()
	w.WriteHeader(status)
}

func newReceiver(t *testing.T, script ...int) (*receiver, string) {
	rc := &receiver{script: script}
	hs := httptest.NewServer(rc)
	t.Cleanup(hs.Close)
	return rc, hs.URL + "/hook"
}

func TestWebhookPushWithSecret(t *testing.T) {
	s := New(t)
	b := s.Bot()
	rc, hook := newReceiver(t)
	r := api(t, s, DefaultToken, "setWebhook", map[string]any{"url": hook, "secret_token": "s3cr3t_-X"})
	mustOK(t, r, nil)
	if r.Description != "Webhook was set" || string(r.Result) != "true" {
		t.Fatalf("setWebhook: %s", r.Raw)
	}
	u1 := b.PrivateText(ada, "one")
	u2 := b.PrivateText(ada, "two")
	if err := b.WaitConfirmed(u2.UpdateID, wait); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.updates) != 2 || rc.updates[0].UpdateID != u1.UpdateID || rc.updates[1].Message.Text != "two" {
		t.Fatalf("received %+v", rc.updates)
	}
	if rc.secrets[0] != "s3cr3t_-X" || rc.secrets[1] != "s3cr3t_-X" {
		t.Fatalf("secrets %q", rc.secrets)
	}
	var info WebhookInfo
	mustOK(t, api(t, s, DefaultToken, "getWebhookInfo", nil), &info)
	if info.URL != hook || info.PendingUpdateCount != 0 || info.MaxConnections != 40 {
		t.Fatalf("info %+v", info)
	}
}

func TestWebhookRetriesThenSucceeds(t *testing.T) {
	s := New(t, WithWebhookRetry(3, time.Millisecond))
	b := s.Bot()
	rc, hook := newReceiver(t, 500, 502)
	mustOK(t, api(t, s, DefaultToken, "setWebhook", map[string]any{"url": hook}), nil)
	u := b.PrivateText(ada, "retry me")
	ds, err := b.WaitDeliveries(3, wait)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WaitConfirmed(u.UpdateID, wait); err != nil {
		t.Fatal(err)
	}
	if ds[0].Status != 500 || ds[1].Status != 502 || ds[2].Status != 200 || ds[2].Attempt != 3 || ds[2].UpdateID != u.UpdateID {
		t.Fatalf("deliveries %+v", ds)
	}
	if ds[0].SecretSent {
		t.Fatal("secret header sent without a secret_token")
	}
	rc.mu.Lock()
	n := len(rc.updates)
	rc.mu.Unlock()
	if n != 3 {
		t.Fatalf("receiver saw %d posts", n)
	}
	if info := b.WebhookInfo(); info.LastErrorMessage != "Wrong response from the webhook: 502 Bad Gateway" || info.LastErrorDate == 0 {
		t.Fatalf("info %+v", info)
	}
}

func TestWebhookGivesUp(t *testing.T) {
	s := New(t, WithWebhookRetry(2, time.Millisecond))
	b := s.Bot()
	_, hook := newReceiver(t, 500, 500, 500, 500)
	mustOK(t, api(t, s, DefaultToken, "setWebhook", map[string]any{"url": hook}), nil)
	u1 := b.PrivateText(ada, "dropped")
	u2 := b.PrivateText(ada, "also dropped")
	if err := b.WaitConfirmed(u2.UpdateID, wait); err != nil {
		t.Fatal(err)
	}
	ds := b.Deliveries()
	if len(ds) != 4 || ds[0].UpdateID != u1.UpdateID || ds[1].Attempt != 2 || ds[2].UpdateID != u2.UpdateID {
		t.Fatalf("deliveries %+v", ds)
	}
}

func TestWebhookWrongAndMissingSecret(t *testing.T) {
	s := New(t)
	b := s.Bot()
	rc, hook := newReceiver(t)
	mustOK(t, api(t, s, DefaultToken, "setWebhook", map[string]any{"url": hook, "secret_token": "right"}), nil)
	b.SetWebhookSecretMode(SecretWrong)
	u := b.PrivateText(ada, "wrong")
	if err := b.WaitConfirmed(u.UpdateID, wait); err != nil {
		t.Fatal(err)
	}
	b.SetWebhookSecretMode(SecretMissing)
	u = b.PrivateText(ada, "missing")
	if err := b.WaitConfirmed(u.UpdateID, wait); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.secrets[0] == "right" || rc.secrets[0] == "" || rc.secrets[1] != "" {
		t.Fatalf("secrets %q", rc.secrets)
	}
}

func TestSetWebhookValidation(t *testing.T) {
	s := New(t)
	for _, bad := range []string{"has space", "semi;colon", strings.Repeat("a", 257), "ünï"} {
		mustFail(t, api(t, s, DefaultToken, "setWebhook", map[string]any{"url": "http://127.0.0.1:1/", "secret_token": bad}),
			400, "Bad Request: secret token contains unallowed characters")
	}
	mustOK(t, api(t, s, DefaultToken, "setWebhook", map[string]any{"url": "http://127.0.0.1:1/", "secret_token": strings.Repeat("a", 256)}), nil)
	mustFail(t, api(t, s, DefaultToken, "setWebhook", map[string]any{"url": "ftp://example.org/"}), 400, "Bad Request: bad webhook: HTTPS url must be provided for webhook")
	r := api(t, s, DefaultToken, "deleteWebhook", nil)
	r2 := api(t, s, DefaultToken, "deleteWebhook", nil)
	if r.Description != "Webhook was deleted" || r2.Description != "Webhook is already deleted" {
		t.Fatalf("%s / %s", r.Raw, r2.Raw)
	}
}

func TestDropPendingUpdates(t *testing.T) {
	s := New(t)
	b := s.Bot()
	b.PrivateText(ada, "old")
	u := b.PrivateText(ada, "old too")
	mustOK(t, api(t, s, DefaultToken, "deleteWebhook", map[string]any{"drop_pending_updates": true}), nil)
	if len(b.Pending()) != 0 || b.Confirmed() != u.UpdateID {
		t.Fatalf("pending %v confirmed %d", b.Pending(), b.Confirmed())
	}
	n := b.PrivateText(ada, "new")
	if n.UpdateID != u.UpdateID+1 {
		t.Fatalf("ids restarted: %d", n.UpdateID)
	}
}
