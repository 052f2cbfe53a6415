package telegramtest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

const wait = 10 * time.Second // generous bound for conditions that should hold at once

// reply is a decoded Bot API answer.
type reply struct {
	Status      int
	OK          bool                `json:"ok"`
	Result      json.RawMessage     `json:"result"`
	ErrorCode   int                 `json:"error_code"`
	Description string              `json:"description"`
	Parameters  *ResponseParameters `json:"parameters"`
	Raw         string
}

// async POSTs params as JSON in a goroutine (no testing.TB there) and delivers the answer; a
// transport or decoding failure comes back as Status -1 with the error in Raw.
func async(s *Server, token, method string, params map[string]any) <-chan reply {
	out := make(chan reply, 1)
	go func() {
		body, _ := json.Marshal(params)
		resp, err := s.Client().Post(s.BotURL(token)+"/"+method, "application/json", bytes.NewReader(body))
		if err != nil {
			out <- reply{Status: -1, Raw: err.Error()}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		r := reply{Status: resp.StatusCode, Raw: string(raw)}
		if err := json.Unmarshal(raw, &r); err != nil {
			r.Status = -1
		}
		out <- r
	}()
	return out
}

// api POSTs params as JSON to method with token and decodes the answer.
func api(t testing.TB, s *Server, token, method string, params map[string]any) reply {
	t.Helper()
	body, _ := json.Marshal(params)
	resp, err := s.Client().Post(s.BotURL(token)+"/"+method, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return decode(t, resp)
}

// callForm POSTs params form-urlencoded.
func callForm(t testing.TB, s *Server, token, method string, params url.Values) reply {
	t.Helper()
	resp, err := s.Client().PostForm(s.BotURL(token)+"/"+method, params)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return decode(t, resp)
}

func decode(t testing.TB, resp *http.Response) reply {
	t.Helper()
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{Status: resp.StatusCode, Raw: string(raw)}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("answer is not JSON (%d): %q", resp.StatusCode, raw)
	}
	return r
}

// mustOK fails unless r is a success, and decodes its result into v (if not nil).
func mustOK(t testing.TB, r reply, v any) {
	t.Helper()
	if !r.OK || r.Status != 200 {
		t.Fatalf("want ok, got %d %s", r.Status, r.Raw)
	}
	if v != nil {
		if err := json.Unmarshal(r.Result, v); err != nil {
			t.Fatalf("result %s: %v", r.Result, err)
		}
	}
}

// mustFail fails unless r is the error code with exactly description desc.
func mustFail(t testing.TB, r reply, code int, desc string) {
	t.Helper()
	if r.OK || r.Status != code || r.ErrorCode != code || r.Description != desc {
		t.Fatalf("want %d %q, got HTTP %d %s", code, desc, r.Status, r.Raw)
	}
	if strings.Contains(r.Raw, `"result"`) {
		t.Fatalf("error answer carries a result: %s", r.Raw)
	}
}

func updates(t testing.TB, r reply) []Update {
	t.Helper()
	var u []Update
	mustOK(t, r, &u)
	return u
}

func ids(us []Update) []int64 {
	var out []int64
	for _, u := range us {
		out = append(out, u.UpdateID)
	}
	return out
}

var ada = Person(111, "Ada")
