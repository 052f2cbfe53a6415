package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/store"
)

// TestStoreOutageAtProcessEnd: a background process ends while the store refuses writes (another
// writer holds SQLite's lock, as a backup or a second host would; a full disk looks the same to
// the host). /healthz says the store is failing instead of ok; when the store takes writes
// again the completion is delivered once, without a restart, and /healthz is ok again.
func TestStoreOutageAtProcessEnd(t *testing.T) {
	w := newWorld(t)
	w.say("42", "", "run sleep 1; echo outage-output")
	w.wait("the start", echotest.Has("Started"))

	db, err := store.Open(filepath.Join(w.g.cfg.DataDir, "hermes.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	locked := true
	defer func() {
		if locked {
			conn.ExecContext(context.Background(), `ROLLBACK`)
		}
	}()

	var body string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		code, b := w.get("/healthz")
		if code == http.StatusServiceUnavailable && strings.Contains(b, `"path": "processes"`) {
			body = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never reported the failing store; last %d %s", code, b)
		}
	}
	// The reason is the store's own error: SQLite's lock, or the write gate that queues behind it.
	if !strings.Contains(body, `"unhealthy"`) || !(strings.Contains(body, "locked") || strings.Contains(body, "busy")) {
		t.Fatalf("/healthz %s", body)
	}
	if n := w.fake.Count("outage-output"); n != 1 { // only the start confirmation so far
		t.Fatalf("the platform got %d messages about the job during the outage: %+v", n, w.fake.Messages())
	}

	if _, err := conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	locked = false
	w.wait("the completion after the store came back", func(m echotest.Message) bool {
		return strings.Contains(m.Text, "outage-output") && !strings.Contains(m.Text, "Started")
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if code, _ := w.get("/healthz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/healthz did not recover")
		}
	}
	w.settle() // nothing left that could still send a duplicate
	if n := w.fake.Count("outage-output"); n != 2 {
		t.Fatalf("start plus completion expected, the platform got %d: %+v", n, w.fake.Messages())
	}
}

// settle waits until nothing the world holds can still be sent: every queued process event is
// acknowledged (done or suppressed) and every ledger row is in a final state. What the platform
// got by then is all it will get, so a test can count it instead of sleeping first.
func (w *world) settle() {
	w.t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		open := ""
		events, err := w.g.procs.Queue().Events(ctx, "")
		if err != nil {
			w.t.Fatal(err)
		}
		for _, e := range events {
			if e.QueueState != "done" && e.QueueState != "suppressed" {
				open = fmt.Sprintf("process event %d is %s", e.Seq, e.QueueState)
			}
		}
		rows, err := w.g.ledger.List(ctx, delivery.Filter{})
		if err != nil {
			w.t.Fatal(err)
		}
		for _, r := range rows {
			if !r.State.Final() {
				open = fmt.Sprintf("delivery %s is %s", r.ID, r.State)
			}
		}
		if open == "" {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("never settled: %s", open)
		}
	}
}

// get fetches path from the world's admin listener (health, metrics, the API).
func (w *world) get(path string) (int, string) {
	w.t.Helper()
	const token = "test-token"
	admin := httptest.NewServer(w.g.AdminHandler(token))
	defer admin.Close()
	req, _ := http.NewRequest("GET", admin.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
