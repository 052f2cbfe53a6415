package adminapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/actions"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/httpguard"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

const token = "the-admin-token"

// TestActionsNeedTheTokenAndRefuseUncertainRetries drives the action endpoints behind the admin
// listener's real guard on a real store, registry and ledger: without the token, with a wrong
// one, or from another site, nothing is done; with it, a running process is killed (and says
// who), a delivery whose outcome is unknown is refused with the reason and stays as it was, a
// refused one goes back to pending, and unknown things answer 404.
func TestActionsNeedTheTokenAndRefuseUncertainRetries(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "hermes.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	k, err := session.Open(ctx, db, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	procs, err := process.New(ctx, db, process.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { procs.Close() })
	ledger, err := delivery.Open(ctx, db, k, nil, delivery.Options{}) // not started: a retried row stays pending
	if err != nil {
		t.Fatal(err)
	}
	rt, err := plugin.New(plugin.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	api := &API{Plugins: rt, Sessions: k, Processes: procs, Ledger: ledger}
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer((&httpguard.Admin{Token: token, Open: IsOpen}).Wrap(mux))
	t.Cleanup(srv.Close)

	src := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: "42", UserID: "me"}
	key, _ := k.Key(src)
	msg := delivery.Message{Plugin: "echo", Profile: "main", Key: key, Target: abi.OutboundMessage{ChatID: "42"}, Text: "the answer", Kind: delivery.KindReply}
	uncertain, err := ledger.Record(ctx, msg, delivery.Failed, "outcome unknown (not resent to avoid a duplicate): connection reset")
	if err != nil {
		t.Fatal(err)
	}
	refused, err := ledger.Record(ctx, msg, delivery.Failed, "chat_not_found: no")
	if err != nil {
		t.Fatal(err)
	}
	running, err := procs.Spawn(ctx, process.SpawnRequest{Command: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}

	post := func(path string, header ...string) (int, map[string]any) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, testdeadline.Scale(30*time.Second))
		defer cancel()
		req, _ := http.NewRequestWithContext(c, "POST", srv.URL+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		json.Unmarshal(b, &v)
		return resp.StatusCode, v
	}
	bearer := []string{"Authorization", "Bearer " + token}
	paths := []string{"/api/processes/" + running.ID + "/kill", "/api/deliveries/" + refused + "/retry", "/api/plugins/echo/reload"}
	for _, p := range paths {
		for name, h := range map[string][]string{
			"no token":    nil,
			"wrong token": {"Authorization", "Bearer nope"},
			"cross site":  append([]string{"Sec-Fetch-Site", "cross-site"}, bearer...),
			"other page":  append([]string{"Origin", "https://evil.example"}, bearer...),
		} {
			if code, _ := post(p, h...); code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Errorf("POST %s with %s: %d, want 401 or 403", p, name, code)
			}
		}
	}
	if in, _ := procs.Inspect(ctx, running.ID); in.State != process.StateRunning {
		t.Fatalf("a refused kill killed the process: %+v", in)
	}
	if rows, _ := ledger.List(ctx, delivery.Filter{State: delivery.Failed}); len(rows) != 2 {
		t.Fatalf("a refused retry changed the ledger: %+v", rows)
	}

	// With the token.
	code, v := post("/api/deliveries/"+uncertain+"/retry", bearer...)
	if code != http.StatusConflict || v["code"] != abi.CodeConflict || !strings.Contains(v["message"].(string), "outcome unknown") {
		t.Fatalf("retrying an uncertain delivery: %d %v", code, v)
	}
	if rows, _ := ledger.List(ctx, delivery.Filter{Uncertain: true}); len(rows) != 1 || rows[0].ID != uncertain {
		t.Fatalf("the uncertain row after a refused retry: %+v", rows)
	}
	code, v = post("/api/deliveries/"+refused+"/retry", bearer...)
	if d, _ := v["delivery"].(map[string]any); code != http.StatusOK || d["state"] != "pending" || d["attempts"].(float64) != 0 {
		t.Fatalf("retrying a refused delivery: %d %v", code, v)
	}
	code, v = post("/api/processes/"+running.ID+"/kill", bearer...)
	if p, _ := v["process"].(map[string]any); code != http.StatusOK || p["state"] == "running" || p["reason"] != actions.KillReason {
		t.Fatalf("killing a running process: %d %v", code, v)
	}
	if code, v = post("/api/processes/"+running.ID+"/kill", bearer...); code != http.StatusConflict || !strings.Contains(v["message"].(string), "ended already") {
		t.Fatalf("killing it again: %d %v", code, v)
	}
	for _, p := range []string{"/api/processes/proc_nosuch/kill", "/api/deliveries/d_nosuch/retry", "/api/plugins/nosuch/reload"} {
		if code, v := post(p, bearer...); code != http.StatusNotFound || v["code"] != abi.CodeNotFound {
			t.Errorf("POST %s: %d %v, want 404", p, code, v)
		}
	}
}
