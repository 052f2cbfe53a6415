package demo

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOutboxIsBounded: only the demo secret may post; what is kept is bounded in bytes (the
// oldest messages go first) and a listing is bounded in count.
func TestOutboxIsBounded(t *testing.T) {
	o := &Outbox{Secret: "s"}
	mux := http.NewServeMux()
	o.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(secret, body string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/demo/outbox", strings.NewReader(body))
		req.Header.Set(SecretHeader, secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("", `{"text":"x"}`); code != 401 {
		t.Fatalf("no secret: %d", code)
	}
	if code := post("s", `{"text":"`+strings.Repeat("x", MaxMessage)+`"}`); code != 400 {
		t.Fatalf("oversized message: %d", code)
	}
	big := `{"text":"` + strings.Repeat("y", MaxMessage-100) + `"}`
	for i := 0; i < 3*MaxBytes/MaxMessage; i++ {
		if code := post("s", big); code != 200 {
			t.Fatalf("post %d: %d", i, code)
		}
	}
	o.mu.Lock()
	kept, bytes := len(o.msgs), o.bytes
	o.mu.Unlock()
	if bytes > MaxBytes || kept == 0 {
		t.Fatalf("kept %d messages, %d bytes (cap %d)", kept, bytes, MaxBytes)
	}
	for i := 0; i < 1500; i++ {
		post("s", `{"text":"small"}`)
	}
	resp, err := http.Get(srv.URL + "/demo/outbox?limit=100000")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Messages []map[string]any }
	json.NewDecoder(resp.Body).Decode(&out)
	if len(out.Messages) != MaxList {
		t.Fatalf("listed %d, want the cap %d", len(out.Messages), MaxList)
	}
}
