package telegramtest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFloodWaitFault(t *testing.T) {
	s := New(t)
	s.AddPrivate(ada)
	s.AddPrivate(Person(222, "Bob"))
	s.InjectFault("SENDMESSAGE", FloodWait(33).ForChat(222))
	// A fault for another chat does not hit chat 111.
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": 111, "text": "x"}), nil)
	r := api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": 222, "text": "x"})
	mustFail(t, r, 429, "Too Many Requests: retry after 33")
	if r.Parameters == nil || r.Parameters.RetryAfter != 33 {
		t.Fatalf("parameters %s", r.Raw)
	}
	if r.Raw != `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 33","parameters":{"retry_after":33}}` {
		t.Fatalf("body %s", r.Raw)
	}
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": 222, "text": "x"}), nil)
	if got := s.SentTexts(222, 0); len(got) != 1 {
		t.Fatalf("flood-waited message recorded: %q", got)
	}
	if reqs := s.Requests("sendMessage", 222); reqs[0].Fault == "" || reqs[0].Status != 429 {
		t.Fatalf("request %+v", reqs[0])
	}
}

func TestFaultsAreFIFO(t *testing.T) {
	s := New(t)
	s.InjectFault("getMe", APIError(403, "Forbidden: bot was blocked by the user"), Migrated(-100777))
	s.InjectFault("*", APIError(500, "Internal Server Error"))
	mustFail(t, api(t, s, DefaultToken, "getMe", nil), 403, "Forbidden: bot was blocked by the user")
	r := api(t, s, DefaultToken, "getMe", nil)
	mustFail(t, r, 400, "Bad Request: group chat was upgraded to a supergroup chat")
	if r.Parameters.MigrateToChatID != -100777 {
		t.Fatalf("%s", r.Raw)
	}
	mustFail(t, api(t, s, DefaultToken, "getMe", nil), 500, "Internal Server Error")
	mustOK(t, api(t, s, DefaultToken, "getMe", nil), nil)
	if s.PendingFaults("getMe") != 0 || s.PendingFaults("*") != 0 {
		t.Fatal("faults left")
	}
}

func TestServerErrorHTML(t *testing.T) {
	s := New(t)
	s.InjectFault("getUpdates", ServerError(502))
	resp, err := s.Client().Post(s.BotURL(DefaultToken)+"/getUpdates", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "<h1>502 Bad Gateway</h1>") {
		t.Fatalf("%d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if json.Valid(body) {
		t.Fatal("HTML error body is JSON")
	}
}

func TestMalformedJSON(t *testing.T) {
	s := New(t)
	s.InjectFault("getMe", MalformedJSON())
	resp, err := s.Client().Get(s.BotURL(DefaultToken) + "/getMe")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v any
	if err := json.NewDecoder(resp.Body).Decode(&v); err == nil || resp.StatusCode != 200 {
		t.Fatalf("decoded a malformed body: %v %v", v, err)
	}
}

func TestConnectionReset(t *testing.T) {
	s := New(t)
	s.InjectFault("sendMessage", ConnectionReset())
	_, err := s.Client().Post(s.BotURL(DefaultToken)+"/sendMessage", "application/json", strings.NewReader(`{"chat_id":1,"text":"x"}`))
	if err == nil {
		t.Fatal("no error from a reset connection")
	}
	if !errors.Is(err, syscall.ECONNRESET) && !strings.Contains(err.Error(), "EOF") {
		t.Logf("reset surfaced as: %v", err)
	}
	if reqs := s.Requests("sendMessage", 0); len(reqs) != 1 || reqs[0].Fault != "connection reset" {
		t.Fatalf("requests %+v", reqs)
	}
}

// A slow answer: the client times out, but the message was accepted, as on the real service.
func TestSlowAnswerStillDelivers(t *testing.T) {
	s := New(t)
	s.AddPrivate(ada)
	s.InjectFault("sendMessage", Slow(time.Minute))
	client := &http.Client{Timeout: 50 * time.Millisecond}
	_, err := client.Post(s.BotURL(DefaultToken)+"/sendMessage", "application/json", strings.NewReader(`{"chat_id":111,"text":"late"}`))
	if err == nil {
		t.Fatal("client did not time out")
	}
	if got, err := s.WaitSent(111, 0, 1, wait); err != nil || got[0].Message.Text != "late" {
		t.Fatalf("slow send not recorded: %v %+v", err, got)
	}
}

func TestFloodControlLimiter(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := NewManualClock(start)
	s := New(t, WithClock(clock), WithFloodControl(DefaultFloodControl()))
	s.AddPrivate(ada)
	send := func(chat int64) reply {
		return api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": chat, "text": "x"})
	}
	for range 3 {
		mustOK(t, send(111), nil) // the burst
	}
	r := send(111)
	mustFail(t, r, 429, "Too Many Requests: retry after 1")
	if r.Parameters.RetryAfter != 1 {
		t.Fatalf("%s", r.Raw)
	}
	clock.Advance(time.Second)
	mustOK(t, send(111), nil)
	mustFail(t, send(111), 429, "Too Many Requests: retry after 1")

	// A group: 20 a minute even when spaced 1 s apart.
	s.AddSupergroup(superID, "S")
	for i := range 20 {
		clock.Advance(time.Second)
		if r := send(superID); !r.OK {
			t.Fatalf("group message %d: %s", i, r.Raw)
		}
	}
	clock.Advance(time.Second)
	r = send(superID)
	if r.Status != 429 || r.Parameters.RetryAfter != 40 {
		t.Fatalf("21st group message: %s", r.Raw)
	}
	// Asserting a client honoured retry_after: nothing for the chat between the 429 and its end.
	deadline := clock.Now().Add(time.Duration(r.Parameters.RetryAfter) * time.Second)
	if next, ok := s.FirstRequest("sendMessage", superID, clock.Now().Add(time.Nanosecond)); ok && next.Time.Before(deadline) {
		t.Fatalf("request at %v before %v", next.Time, deadline)
	}
	clock.Advance(40 * time.Second)
	mustOK(t, send(superID), nil)
	if got, ok := s.FirstRequest("sendMessage", superID, deadline); !ok || !got.Time.Equal(deadline) || got.Status != 200 {
		t.Fatalf("FirstRequest %+v %v", got, ok)
	}
}

// Faults after the effect: the message is posted, then the answer is lost or garbled. Each
// one is the case where a client that retries duplicates the message.
func TestFaultsAfterEffect(t *testing.T) {
	cases := []struct {
		name  string
		fault Fault
		check func(t *testing.T, resp *http.Response, body []byte, err error)
	}{
		{"html 502", ServerError(502).AfterEffect(), func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err != nil || resp.StatusCode != 502 || json.Valid(body) {
				t.Fatalf("%v %v %q", err, resp, body)
			}
		}},
		{"json 500", APIError(500, "Internal Server Error").AfterEffect(), func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err != nil || resp.StatusCode != 500 || !strings.Contains(string(body), `"error_code":500`) {
				t.Fatalf("%v %v %q", err, resp, body)
			}
		}},
		{"malformed json", MalformedJSON().AfterEffect(), func(t *testing.T, resp *http.Response, body []byte, err error) {
			// The first half of the real answer: it names the posted message, then stops.
			if err != nil || resp.StatusCode != 200 || json.Valid(body) || !strings.HasPrefix(string(body), `{"ok":true,"result":{"message_id":1,`) {
				t.Fatalf("%v %v %q", err, resp, body)
			}
		}},
		{"truncated body", TruncatedBody().AfterEffect(), func(t *testing.T, resp *http.Response, body []byte, err error) {
			if !errors.Is(err, io.ErrUnexpectedEOF) || resp.StatusCode != 200 {
				t.Fatalf("want a 200 whose body read fails with unexpected EOF, got %v %v %q", err, resp, body)
			}
		}},
		{"connection reset", ConnectionReset().AfterEffect(), func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err == nil {
				t.Fatalf("no error: %v", resp)
			}
		}},
		{"slow", Slow(time.Minute), func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err == nil {
				t.Fatalf("no timeout: %v", resp)
			}
		}},
		{"no answer", NoAnswer(), func(t *testing.T, resp *http.Response, body []byte, err error) {
			if err == nil {
				t.Fatalf("no timeout: %v", resp)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(t)
			s.AddPrivate(ada)
			s.InjectFault("sendMessage", c.fault)
			client := &http.Client{Timeout: 300 * time.Millisecond}
			resp, err := client.Post(s.BotURL(DefaultToken)+"/sendMessage", "application/json", strings.NewReader(`{"chat_id":111,"text":"posted"}`))
			var body []byte
			if err == nil {
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			c.check(t, resp, body, err)
			if got := s.SentTexts(111, 0); len(got) != 1 || got[0] != "posted" {
				t.Fatalf("transcript %q, want the message posted once", got)
			}
			reqs := s.Requests("sendMessage", 111)
			if len(reqs) != 1 || reqs[0].Fault != c.fault.String() {
				t.Fatalf("requests %+v", reqs)
			}
			if c.fault.after && c.fault.kind != faultDelay && c.fault.kind != faultHang && !strings.HasPrefix(reqs[0].Fault, "after effect: ") {
				t.Fatalf("fault recorded as %q", reqs[0].Fault)
			}
		})
	}
}

// The same faults before the effect post nothing: retrying them is safe.
func TestFaultsBeforeEffectPostNothing(t *testing.T) {
	for _, f := range []Fault{ServerError(0), MalformedJSON(), TruncatedBody(), ConnectionReset(), APIError(500, "Internal Server Error")} {
		s := New(t)
		s.AddPrivate(ada)
		s.InjectFault("sendMessage", f)
		resp, err := s.Client().Post(s.BotURL(DefaultToken)+"/sendMessage", "application/json", strings.NewReader(`{"chat_id":111,"text":"x"}`))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if got := s.SentTexts(111, 0); len(got) != 0 {
			t.Fatalf("%s: posted %q", f, got)
		}
	}
}

func TestNoAnswerEndsWithTheClient(t *testing.T) {
	s := New(t)
	s.InjectFault("getMe", NoAnswer())
	client := &http.Client{Timeout: 100 * time.Millisecond}
	if _, err := client.Get(s.BotURL(DefaultToken) + "/getMe"); err == nil {
		t.Fatal("answered")
	}
	// The request took effect and is recorded without an answer (status 0); Close, at cleanup,
	// does not wait for the client that never came back.
	if r := s.Requests("getMe", 0); len(r) != 1 || r[0].Fault != "no answer" || r[0].Status != 0 {
		t.Fatalf("%+v", r)
	}
}
