package egress

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hermes-host/hermes-host/abi"
)

func TestPolicy(t *testing.T) {
	p := Policy{Manifest: []string{"api.telegram.org", "*.slack.com", "127.0.0.1:9000"}, Internal: []string{"127.0.0.1"}}
	for raw, want := range map[string]bool{
		"https://api.telegram.org/bot1/getMe": true,
		"https://API.Telegram.org/x":          true,
		"https://evil.org/?api.telegram.org":  false,
		"https://api.telegram.org.evil.org/":  false,
		"https://wss-primary.slack.com/x":     true,
		"https://slack.com/api":               false,
		"http://127.0.0.1:9000/x":             true,
		"http://127.0.0.1:9001/x":             false,
		"http://user@api.telegram.org@evil/":  false,
		"https://api.telegram.org:6379/":      false, // a port-less pattern is the scheme's default port
		"http://api.telegram.org/":            true,
		"https://api.telegram.org:443/":       true,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Check(u, Use{Export: "send", Method: "GET"}) == nil; got != want {
			t.Errorf("%s: allowed=%v, want %v", raw, got, want)
		}
	}
	narrowed := Policy{Manifest: p.Manifest, Narrow: []string{"api.telegram.org"}, Extra: []string{"localhost"}}
	// An operator's port-less pattern grants every port.
	for raw, want := range map[string]bool{
		"https://api.telegram.org/": true,
		"https://x.slack.com/":      false, // declared, but the operator narrowed it away
		"http://localhost:1234/":    true,  // granted by the operator
	} {
		u, _ := url.Parse(raw)
		if got := narrowed.Check(u, Use{Export: "send", Method: "GET"}) == nil; got != want {
			t.Errorf("narrowed %s: allowed=%v, want %v", raw, got, want)
		}
	}
	for _, bad := range []string{"", "http://x", "*.", "a b", "h:port", "*.com", "*.co.uk", "*.github.io", "*.COM", "*.127.0.0.1"} {
		if ValidatePattern(bad) == nil {
			t.Errorf("ValidatePattern(%q) accepted", bad)
		}
	}
}

func TestHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write([]byte(strings.Repeat("x", 2000)))
		case "/redirect-out":
			http.Redirect(w, r, "http://example.invalid/", http.StatusFound)
		case "/cut":
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"ok\":true,"))
			conn.Close()
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		default:
			w.Header().Set("X-Echo", r.Header.Get("X-Test"))
			w.Write([]byte("hello " + r.Method))
		}
	}))
	defer srv.Close()
	c := NewClient(Limits{MaxResponse: 1000})
	ctx := context.Background()
	allowed := Policy{Extra: []string{"127.0.0.1"}} // the operator's grant of the loopback fake

	resp, err := c.HTTP(ctx, allowed, "send", &abi.HTTPRequest{Method: "POST", URL: srv.URL + "/x", Headers: map[string][]string{"X-Test": {"1"}}})
	if err != nil || resp.Status != 200 || string(resp.Body) != "hello POST" || resp.Headers["X-Echo"][0] != "1" {
		t.Fatalf("declared loopback: %+v, %v", resp, err)
	}
	if _, err := c.HTTP(ctx, Policy{Manifest: []string{"api.telegram.org"}}, "send", &abi.HTTPRequest{URL: srv.URL}); abi.CodeOf(err) != abi.CodeDenied {
		t.Fatalf("undeclared host: %v", err)
	}
	if _, err := c.HTTP(ctx, allowed, "send", &abi.HTTPRequest{URL: srv.URL + "/big"}); abi.CodeOf(err) != abi.CodeTooLarge {
		t.Fatalf("over cap: %v", err)
	}
	if resp, err := c.HTTP(ctx, allowed, "send", &abi.HTTPRequest{URL: srv.URL + "/big", MaxBytes: 10}); abi.CodeOf(err) != abi.CodeTooLarge {
		t.Fatalf("over the plugin's own cap: %+v %v", resp, err)
	}
	if _, err := c.HTTP(ctx, allowed, "send", &abi.HTTPRequest{URL: srv.URL + "/redirect-out"}); abi.CodeOf(err) != abi.CodeDenied {
		t.Fatalf("redirect to an undeclared host: %v", err)
	}
	// The request was sent and the answer never came: the outcome is uncertain, not a plain timeout.
	if _, err := c.HTTP(ctx, allowed, "send", &abi.HTTPRequest{URL: srv.URL + "/slow", TimeoutMs: 50}); abi.CodeOf(err) != abi.CodeUncertain {
		t.Fatalf("slow: %v", err)
	}
	// An answer whose body stops short: the server acted, the answer is lost. Uncertain too.
	if _, err := c.HTTP(ctx, allowed, "send", &abi.HTTPRequest{URL: srv.URL + "/cut"}); abi.CodeOf(err) != abi.CodeUncertain || !strings.Contains(err.Error(), "answered 200") {
		t.Fatalf("cut body: %v", err)
	}
	// Nothing listening: nothing was sent, so it is a plain I/O error (safe to retry).
	if _, err := c.HTTP(ctx, allowed, "send", &abi.HTTPRequest{URL: "http://127.0.0.1:1/x"}); abi.CodeOf(err) != abi.CodeIO {
		t.Fatalf("refused: %v", err)
	}
	if _, err := c.HTTP(ctx, allowed, "send", &abi.HTTPRequest{URL: "file:///etc/passwd"}); abi.CodeOf(err) != abi.CodeBadRequest {
		t.Fatalf("file URL: %v", err)
	}
}

func TestWebSocket(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ctx := context.Background()
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if string(data) == "bye" {
				conn.Close(4012, "server says bye")
				return
			}
			conn.Write(ctx, typ, append([]byte("echo:"), data...))
		}
	}))
	defer srv.Close()
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http")
	c := NewClient(Limits{MaxConns: 2})
	defer c.Close()
	ctx := context.Background()
	me := Owner{"yuanbao", "main"}
	pol := Policy{Extra: []string{"127.0.0.1"}}

	if _, err := c.WSOpen(ctx, me, Policy{Manifest: []string{"bot-wss.yuanbao.tencent.com"}}, "poll", &abi.WSOpenRequest{URL: wsURL}); abi.CodeOf(err) != abi.CodeDenied {
		t.Fatalf("undeclared: %v", err)
	}
	id, err := c.WSOpen(ctx, me, pol, "poll", &abi.WSOpenRequest{URL: wsURL})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing queued: a receive times out empty.
	r, err := c.WSRecv(ctx, me, &abi.WSRecvRequest{Conn: id, TimeoutMs: 20})
	if err != nil || len(r.Frames) != 0 || r.Closed {
		t.Fatalf("idle recv: %+v %v", r, err)
	}
	for _, m := range []string{"a", "b"} {
		if err := c.WSSend(ctx, me, pol, "poll", &abi.WSSendRequest{Conn: id, Frame: abi.WSFrame{Data: []byte(m)}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < 2 {
		r, err := c.WSRecv(ctx, me, &abi.WSRecvRequest{Conn: id, TimeoutMs: 5000, MaxFrames: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range r.Frames {
			got = append(got, string(f.Data))
		}
	}
	if got[0] != "echo:a" || got[1] != "echo:b" {
		t.Fatalf("frames %q", got)
	}
	// Another plugin or profile cannot use the connection.
	if err := c.WSSend(ctx, Owner{"yuanbao", "work"}, pol, "poll", &abi.WSSendRequest{Conn: id}); abi.CodeOf(err) != abi.CodeNotFound {
		t.Fatalf("foreign owner: %v", err)
	}
	// The peer closes: the close code arrives, then the id is forgotten.
	c.WSSend(ctx, me, pol, "poll", &abi.WSSendRequest{Conn: id, Frame: abi.WSFrame{Data: []byte("bye")}})
	r, err = c.WSRecv(ctx, me, &abi.WSRecvRequest{Conn: id, TimeoutMs: 5000})
	if err != nil || !r.Closed || r.CloseCode != 4012 || r.CloseReason != "server says bye" {
		t.Fatalf("close: %+v %v", r, err)
	}
	if _, err := c.WSRecv(ctx, me, &abi.WSRecvRequest{Conn: id}); abi.CodeOf(err) != abi.CodeNotFound {
		t.Fatalf("after close: %v", err)
	}
	// The connection cap is per owner.
	a, err1 := c.WSOpen(ctx, me, pol, "poll", &abi.WSOpenRequest{URL: wsURL})
	_, err2 := c.WSOpen(ctx, me, pol, "poll", &abi.WSOpenRequest{URL: wsURL})
	_, err3 := c.WSOpen(ctx, me, pol, "poll", &abi.WSOpenRequest{URL: wsURL})
	if err1 != nil || err2 != nil || abi.CodeOf(err3) != abi.CodeTooLarge {
		t.Fatalf("cap: %v %v %v", err1, err2, err3)
	}
	if err := c.WSClose(me, &abi.WSCloseRequest{Conn: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WSOpen(ctx, me, pol, "poll", &abi.WSOpenRequest{URL: wsURL}); err != nil {
		t.Fatalf("after closing one: %v", err)
	}
}
