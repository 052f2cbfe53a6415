package e2e

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mt "github.com/hermes-host/hermes-host/conformance/matrixtest"
	"github.com/hermes-host/hermes-host/internal/e2e/e2etest"
)

const (
	matrixAnn = "@ann:hermes.test"
	matrixBob = "@bob:hermes.test"
)

// matrixHost is the real binary with the real matrix.wasm, pointed at a fresh fake homeserver
// that stands in for matrix-client.matrix.org (egress_alias: the plugin's scopes apply).
type matrixHost struct {
	hs        *mt.Server
	room      *mt.Room // Ops: the bot, ann and bob (a group room)
	bin, data string
}

func startMatrixHost(t *testing.T) *matrixHost {
	t.Helper()
	hs := mt.New(t)
	hs.AddUser(matrixAnn, "Ann")
	hs.AddUser(matrixBob, "Bob")
	room := hs.CreateRoom("Ops", matrixAnn, matrixBob)
	bin := hostBinary(t)
	plugins := e2etest.Plugins(t, "matrix")
	data := t.TempDir()
	u, _ := url.Parse(hs.URL())
	cfg := filepath.Join(data, "hermes.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
plugins:
  matrix:
    egress_alias: {"%s": matrix-client.matrix.org}
    profiles:
      main: {homeserver: "%s", access_token: "%s"}
    access:
      main: %s
`, u.Host, hs.URL(), mt.DefaultBotToken, openAccess)), 0o600)
	addr, stop := startServe(t, bin, plugins, data, "--config", cfg)
	_ = addr
	t.Cleanup(stop)
	// Past its first sync, the bot hears what is said from now on.
	if err := hs.WaitSyncing(mt.DefaultBotToken, 60*time.Second); err != nil {
		t.Fatalf("the plugin never long-polled /sync: %v", err)
	}
	return &matrixHost{hs: hs, room: room, bin: bin, data: data}
}

func (h *matrixHost) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	if err := h.hs.Wait(60*time.Second, cond); err != nil {
		var posted []string
		for _, e := range h.room.BotMessages() {
			posted = append(posted, fmt.Sprintf("%v: %q", e.Content["m.relates_to"], e.Body()))
		}
		t.Fatalf("%s: %v\nposted: %s", what, err, strings.Join(posted, "\n"))
	}
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

func (h *matrixHost) has(thread, sub string) func() bool {
	return func() bool { return h.room.Has(thread, sub) }
}

// TestMatrixEndToEnd runs the real binary with the real matrix.wasm against the fake
// homeserver: a mention in a room is answered in its thread; a process started from thread A
// notifies thread A while the user talks in thread B; process output containing @room pings
// nobody; after !new in thread A an old completion is dropped and recorded.
func TestMatrixEndToEnd(t *testing.T) {
	h := startMatrixHost(t)
	bot := []string{mt.DefaultBotUserID}

	a := h.room.Say(matrixAnn, mt.Message{Body: "Hermes: help", Mentions: bot})
	h.waitFor(t, "the reply in thread A", h.has(a.ID, "built-in agent"))
	if top := h.room.Posted(""); len(top) != 0 {
		t.Fatalf("answered in the room's main timeline: %q", top)
	}

	// The bot follows thread A: no mention needed there.
	h.room.Say(matrixAnn, mt.Message{Body: "run sleep 1; echo mx-done-A", Thread: a.ID, Fallback: a.ID, NoMentions: true})
	h.waitFor(t, "the start confirmation in A", h.has(a.ID, "Started"))
	b := h.room.Say(matrixAnn, mt.Message{Body: "Hermes: hello from thread B", Mentions: bot})
	h.waitFor(t, "a reply in thread B", h.has(b.ID, "hello from thread B"))
	// The completion, not the start confirmation (which quotes the command).
	h.waitFor(t, "the completion in thread A", h.has(a.ID, "output:\nmx-done-A"))
	if h.room.Has(b.ID, "mx-done-A") {
		t.Fatal("the completion leaked into thread B")
	}

	// Process output that says @room pings nobody.
	h.room.Say(matrixAnn, mt.Message{Body: "run echo '@room deploy finished'", Thread: a.ID, Fallback: a.ID, NoMentions: true})
	h.waitFor(t, "the @room output in A", h.has(a.ID, "output:\n@room deploy finished"))
	for _, e := range h.room.BotMessages() {
		if pings := h.hs.Pings(e); len(pings) > 0 {
			t.Fatalf("the bot's message %q pings %v", e.Body(), pings)
		}
	}

	h.room.Say(matrixAnn, mt.Message{Body: "run sleep 2; echo mx-stale-output", Thread: a.ID, Fallback: a.ID, NoMentions: true})
	h.waitFor(t, "the second start", h.has(a.ID, "mx-stale-output"))
	h.room.Say(matrixAnn, mt.Message{Body: "!new", Thread: a.ID, Fallback: a.ID, NoMentions: true})
	h.waitFor(t, "the /new confirmation", h.has(a.ID, "New conversation"))

	var dropped string
	defer func() {
		if t.Failed() {
			out, _ := runCLI(h.bin, h.data, "deliveries", "ls", "--dropped")
			ses, _ := runCLI(h.bin, h.data, "sessions", "ls")
			t.Logf("dropped:\n%s\nsessions:\n%s\nthread A: %q", out, ses, h.room.Posted(a.ID))
		}
	}()
	eventually(t, "the stale completion to be recorded as dropped", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls", "--dropped", "--key", "agent:main:matrix:group:"+strings.ReplaceAll(h.room.ID, ":", "%3A")+":"+a.ID)
		dropped = out
		return err == nil && strings.Contains(out, "stale: user_boundary")
	})
	t.Logf("deliveries ls --dropped:\n%s\nthread A: %q", dropped, h.room.Posted(a.ID))
	for _, s := range h.room.Posted(a.ID) {
		if strings.Contains(s, "mx-stale-output") && !strings.HasPrefix(s, "Started") {
			t.Fatalf("stale output posted: %q", s)
		}
	}
	// The bot's own posts came back in every sync and started nothing.
	for _, s := range h.room.Posted(a.ID) {
		if strings.Contains(s, "Unknown") {
			t.Fatalf("the bot answered itself: %q", s)
		}
	}
}

// TestMatrixSendRetriedAfterTimeoutOnce: the homeserver posts the reply at once and answers
// only after the call deadline. The plugin's request times out (outcome unknown); since its
// transaction id comes from the delivery id, it answers retryable, the host resends with the
// same transaction id, and the homeserver answers the first event without posting again: the
// user sees the reply once, and the ledger says delivered.
func TestMatrixSendRetriedAfterTimeoutOnce(t *testing.T) {
	h := startMatrixHost(t)
	h.hs.InjectFault(mt.EndpointSend, mt.Slow(12*time.Second).ForRoom(h.room.ID))
	a := h.room.Say(matrixAnn, mt.Message{Body: "Hermes: help", Mentions: []string{mt.DefaultBotUserID}})
	h.waitFor(t, "a second attempt of the reply", func() bool {
		reqs := h.hs.Requests(mt.EndpointSend)
		return len(reqs) >= 2 && reqs[1].Status == 200
	})
	reqs := h.hs.Requests(mt.EndpointSend)
	if len(reqs) != 2 || reqs[0].Txn != reqs[1].Txn || reqs[0].Dedup || !reqs[1].Dedup || reqs[0].Fault == "" {
		var sum []string
		for _, r := range reqs {
			sum = append(sum, fmt.Sprintf("txn %s status %d fault %q dedup %v", r.Txn, r.Status, r.Fault, r.Dedup))
		}
		t.Fatalf("send requests, want two with one transaction id, the second answered from the cache:\n%s", strings.Join(sum, "\n"))
	}
	t.Logf("first attempt (answer held 12 s) then a retry %v later with txn %s, answered from the transaction cache",
		reqs[1].Time.Sub(reqs[0].Time).Round(time.Millisecond), reqs[1].Txn)
	if got := h.room.Posted(a.ID); len(got) != 1 || !strings.Contains(got[0], "built-in agent") {
		t.Fatalf("thread A holds %q: want the reply once", got)
	}
	eventually(t, "the reply recorded delivered", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls")
		return err == nil && strings.Contains(out, "delivered") && !strings.Contains(out, "failed")
	})
}
