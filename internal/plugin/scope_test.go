package plugin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// TestEgressScopes: a plugin whose manifest scopes its API host to send tries to post from its
// webhook: the host refuses with denied, naming the scope, nothing reaches the platform, the
// refusal is counted and shown; the same post from send goes through.
func TestEgressScopes(t *testing.T) {
	var posts atomic.Int32
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.Write([]byte(`"posted"`))
	}))
	defer fake.Close()
	r := newRuntime(t, map[string]string{"poster.wasm": "testdata/poster"}, Config{
		Env: &Env{Egress: egress.NewClient(egress.Limits{})},
		Plugins: map[string]Settings{"poster": {
			// The loopback fake stands in for api.chat.example: its scopes apply to it.
			EgressAlias: map[string]string{strings.TrimPrefix(fake.URL, "http://"): "api.chat.example"},
			Profiles:    map[string]json.RawMessage{"main": json.RawMessage(`{"api_base":"` + fake.URL + `"}`)},
		}}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatal(rej)
	}
	p := r.Get("poster")
	res, err := p.Webhook(context.Background(), "main", abi.WebhookRequest{Method: "POST", Body: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	var refused abi.Error
	json.Unmarshal(res.Response.Body, &refused)
	if refused.Code != abi.CodeDenied || !strings.Contains(refused.Message, `"post-from-send": send POST /bot*/sendMessage`) ||
		!strings.Contains(refused.Message, "from webhook") || strings.Contains(refused.Message, "SECRET") {
		t.Fatalf("post from webhook: %s", res.Response.Body)
	}
	if n := posts.Load(); n != 0 {
		t.Fatalf("%d requests reached the platform from webhook", n)
	}
	info := p.Info()
	if info.EgressDenied != 1 || !strings.Contains(info.LastDenied, "post-from-send") {
		t.Fatalf("refusal not shown: %d %q", info.EgressDenied, info.LastDenied)
	}
	sent, err := p.Send(context.Background(), "main", abi.OutboundMessage{ChatID: "1", Text: "hi"})
	if err != nil || len(sent.MessageIDs) != 1 || sent.MessageIDs[0] != `"posted"` || posts.Load() != 1 {
		t.Fatalf("post from send: %+v %v (posts %d)", sent, err, posts.Load())
	}
}

// TestUnscopedPlatformEgressFlagged: unscoped egress to a chat platform's API host loads with a
// warning the operator sees, and is refused under strict_egress.
func TestUnscopedPlatformEgressFlagged(t *testing.T) {
	for _, strict := range []bool{false, true} {
		r := newRuntime(t, map[string]string{"unscoped.wasm": hostileTD + "unscoped"}, Config{StrictEgress: strict})
		rej := r.Scan(context.Background())
		if !strict {
			if len(rej) != 0 || len(r.Get("unscoped").Info().Warnings) != 1 ||
				!strings.Contains(r.Get("unscoped").Info().Warnings[0], "api.telegram.org, a chat platform's API") {
				t.Fatalf("not strict: %+v %+v", rej, r.Get("unscoped"))
			}
			continue
		}
		if len(rej) != 1 || !strings.Contains(rej[0].Error, "refused under strict_egress") {
			t.Fatalf("strict: %+v", rej)
		}
	}
}
