package httpguard

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Guessing the admin token: five wrong tokens from one address, then that address is refused
// with 429 (even with the right token, so a lucky guess tells nothing) and the refusal is
// logged once; another address is not affected; requests without a token never count; after
// Every, one more attempt is allowed.
func TestThrottleStopsTokenGuessing(t *testing.T) {
	var logs bytes.Buffer
	th := NewThrottle(5, time.Minute, slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Unix(1_800_000_000, 0)
	th.now = func() time.Time { return now }
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := (&Admin{Token: "right", Throttle: th}).Wrap(ok)
	do := func(remote, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://127.0.0.1/api/plugins", nil)
		r.RemoteAddr = remote
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const guesser, other = "127.0.0.1:40001", "10.0.0.9:5000"
	for range 20 {
		if w := do(guesser, ""); w.Code != http.StatusUnauthorized {
			t.Fatalf("no token: %d, want 401", w.Code)
		}
	}
	for i := range 5 {
		// Another port of the same address is the same client.
		if w := do(fmt.Sprintf("127.0.0.1:%d", 40002+i), "wrong"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
		}
	}
	for _, token := range []string{"wrong", "right"} {
		w := do(guesser, token)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "61" {
			t.Fatalf("token %q after five failures: %d Retry-After %q, want 429 61", token, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if n := strings.Count(logs.String(), "too many failures"); n != 1 {
		t.Errorf("%d refusals logged, want 1:\n%s", n, logs.String())
	}
	if w := do(other, "right"); w.Code != http.StatusNoContent {
		t.Errorf("another address: %d, want 204", w.Code)
	}
	now = now.Add(time.Minute)
	if w := do(guesser, "right"); w.Code != http.StatusNoContent {
		t.Errorf("a minute later, the right token: %d, want 204", w.Code)
	}
	if w := do(guesser, "wrong"); w.Code != http.StatusUnauthorized {
		t.Errorf("a minute later, one wrong token: %d, want 401", w.Code)
	}
	if w := do(guesser, "right"); w.Code != http.StatusTooManyRequests {
		t.Errorf("after that failure: %d, want 429", w.Code)
	}
}

// A flood of addresses does not grow the table without bound.
func TestThrottleForgetsClients(t *testing.T) {
	th := NewThrottle(2, time.Second, slog.New(slog.DiscardHandler))
	now := time.Unix(1_800_000_000, 0)
	th.now = func() time.Time { return now }
	for i := range 3 * maxClients {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1", i>>16, i>>8&255, i&255)
		th.Fail(r)
		now = now.Add(time.Millisecond)
	}
	if n := len(th.clients); n > maxClients {
		t.Fatalf("%d clients remembered, want at most %d", n, maxClients)
	}
}
