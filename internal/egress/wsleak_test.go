package egress

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/hermes-host/hermes-host/abi"
)

// TestClosingAFullConnectionLeavesNoGoroutine: the peer fills the frame queue (the plugin does
// not read), then the connection is closed by the host (the plugin's close, its unload, the
// host's shutdown). The reader goroutine, blocked on the full queue, must end with it.
func TestClosingAFullConnectionLeavesNoGoroutine(t *testing.T) {
	for name, closeIt := range map[string]func(c *Client, id string){
		"ws_close":   func(c *Client, id string) { c.WSClose(Owner{"p", "main"}, &abi.WSCloseRequest{Conn: id}) },
		"unload":     func(c *Client, id string) { c.CloseOwner("p") },
		"host close": func(c *Client, id string) { c.Close() },
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				defer conn.CloseNow()
				ctx := r.Context()
				for i := 0; i < 20; i++ {
					if conn.Write(ctx, websocket.MessageText, []byte("frame")) != nil {
						return
					}
				}
				conn.Read(ctx) // until the client closes
			}))
			defer srv.Close()
			ignore := goleak.IgnoreCurrent()
			c := NewClient(Limits{QueuedFrames: 4})
			id, err := c.WSOpen(context.Background(), Owner{"p", "main"}, Policy{Extra: []string{"127.0.0.1"}}, "poll",
				&abi.WSOpenRequest{URL: "ws" + strings.TrimPrefix(srv.URL, "http")})
			if err != nil {
				t.Fatal(err)
			}
			wc, _ := c.ws.get(Owner{"p", "main"}, id)
			for deadline := time.Now().Add(10 * time.Second); len(wc.frames) < cap(wc.frames); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the queue never filled")
				}
			}
			closeIt(c, id)
			c.Close()
			for _, tr := range c.transports {
				tr.CloseIdleConnections()
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}
