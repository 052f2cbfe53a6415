package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// lockStore makes the world's store refuse writes as another writer does (a second host on the
// same file, a backup, a stuck transaction; a full disk looks the same to the host, only
// sooner): a connection of its own holds SQLite's write lock until release is called.
func (w *world) lockStore() (release func()) {
	w.t.Helper()
	ctx := context.Background()
	db, err := store.Open(filepath.Join(w.g.cfg.DataDir, "hermes.db"), store.Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		w.t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			conn.ExecContext(ctx, `ROLLBACK`)
			conn.Close()
			db.Close()
		}
	}
	w.t.Cleanup(release)
	return release
}

// health is /healthz's answer.
type health struct {
	code    int
	Status  string          `json:"status"`
	Error   string          `json:"error"`
	Failing []store.Failure `json:"failing"`
	Plugins int             `json:"plugins"`
	Loading []string        `json:"loading"`
}

func (h health) failing(path string) (store.Failure, bool) {
	i := slices.IndexFunc(h.Failing, func(f store.Failure) bool { return f.Path == path })
	if i < 0 {
		return store.Failure{}, false
	}
	return h.Failing[i], true
}

func (w *world) health() health {
	w.t.Helper()
	code, body := w.get("/healthz")
	h := health{code: code}
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		w.t.Fatalf("/healthz %d %q: %v", code, body, err)
	}
	return h
}

// waitHealth polls /healthz until cond holds (failing the test after a minute).
func (w *world) waitHealth(what string, cond func(health) bool) health {
	w.t.Helper()
	for deadline := time.Now().Add(testdeadline.Scale(time.Minute)); ; time.Sleep(20 * time.Millisecond) {
		h := w.health()
		if cond(h) {
			return h
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for /healthz to say %s; last %+v", what, h)
		}
	}
}

// post sends a chat message with the given platform id through the echo plugin's webhook and
// returns the status.
func (w *world) post(id, chat, text string) int {
	w.t.Helper()
	body, _ := json.Marshal(map[string]string{"id": id, "chat_id": chat, "chat_type": "dm", "user_id": "u1", "text": text})
	resp, err := http.Post(w.srv.URL+"/hooks/echo/main", "application/json", strings.NewReader(string(body)))
	if err != nil {
		w.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// isLock reports whether a failure's error is SQLite's lock, or the write gate queued behind it,
// or the probe that waited for it.
func isLock(f store.Failure) bool {
	return strings.Contains(f.Error, "locked") || strings.Contains(f.Error, "busy") || strings.Contains(f.Error, "did not commit")
}

// TestHealthWhenTheInboxRefusesWrites: the store refuses writes while an inbound event arrives.
// The webhook answers 503 (the event is not recorded, so the platform retries), and /healthz
// is unhealthy (503) within 2 s of that refusal, naming the inbox and SQLite's error. Once the
// store takes writes again, the platform's retry is recorded and answered, and /healthz is ok
// again without a restart.
func TestHealthWhenTheInboxRefusesWrites(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	if h := w.health(); h.code != http.StatusOK || h.Status != "ok" {
		t.Fatalf("before the outage: %+v", h)
	}
	release := w.lockStore()
	if code := w.post("m-outage", "42", "hello through the outage"); code != http.StatusServiceUnavailable {
		t.Fatalf("webhook while the inbox refuses writes: %d, want 503", code)
	}
	refused := time.Now()
	h := w.waitHealth("the inbox refused", func(h health) bool { _, ok := h.failing(store.PathInbox); return ok })
	if took, within := time.Since(refused), testdeadline.Scale(2*time.Second); took > within {
		t.Fatalf("/healthz named the inbox %v after it refused the event, want within %v (2s on a quiet machine)", took, within)
	}
	f, _ := h.failing(store.PathInbox)
	if h.code != http.StatusServiceUnavailable || h.Status != "unhealthy" || !isLock(f) ||
		!strings.Contains(h.Error, "inbox: "+f.Error) {
		t.Fatalf("/healthz %+v", h)
	}

	release()
	if code := w.post("m-outage", "42", "hello through the outage"); code != http.StatusOK {
		t.Fatalf("the platform's retry after the outage: %d", code)
	}
	w.wait("the answer to the retried event", echotest.Has("hello through the outage"))
	w.waitHealth("ok after the outage", func(h health) bool { return h.code == http.StatusOK && h.Status == "ok" })
}

// TestHealthWhenTheLedgerRefusesWrites: a reply waits in the ledger (the platform throttles the
// chat), and the store starts refusing writes. The ledger's next write (recording the retry, or
// claiming the row for the next attempt) is refused, and /healthz names the ledger within 2 s of
// that refusal. Once the store takes writes again /healthz is ok without a restart, and the
// reply is delivered once.
func TestHealthWhenTheLedgerRefusesWrites(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.fake.Throttle(true)
	w.say("43", "", "held in the ledger")
	if !w.fake.WaitAttempt(testdeadline.Scale(30 * time.Second)) {
		t.Fatal("the reply was never attempted")
	}
	release := w.lockStore()
	var seen time.Time
	h := w.waitHealth("the ledger refused", func(h health) bool {
		_, ok := h.failing(store.PathLedger)
		seen = time.Now()
		return ok
	})
	f, _ := h.failing(store.PathLedger)
	if lag, within := seen.Sub(f.Since), testdeadline.Scale(2*time.Second); lag > within {
		t.Fatalf("/healthz named the ledger %v after its write was refused (at %v), want within %v (2s on a quiet machine)", lag, f.Since, within)
	}
	// The error names the first refused write: the ledger's, or the health probe's when the
	// probe (which writes every second) was refused first on a loaded machine; the ledger is in
	// Failing either way.
	if h.code != http.StatusServiceUnavailable || h.Status != "unhealthy" || !isLock(f) ||
		!strings.Contains(h.Error, "ledger: "+f.Error) && !strings.Contains(h.Error, "probe: ") {
		t.Fatalf("/healthz %+v", h)
	}

	release()
	w.fake.Throttle(false)
	w.waitHealth("ok after the outage", func(h health) bool { return h.code == http.StatusOK && h.Status == "ok" })
	w.wait("the reply after the outage", echotest.Has("held in the ledger"))
	if n := w.fake.Count("held in the ledger"); n != 1 {
		t.Fatalf("the reply was delivered %d times", n)
	}
}

// TestHealthLoadingBeforeThePluginsLoad: the listeners answer before the plugins directory has
// been scanned. Then /healthz says "loading" (not "ok" with no plugins), and a webhook for a
// plugin still to load answers 503 with Retry-After (the platform retries), not 404 "no such
// webhook". A delivery pending from the last run waits for its plugin meanwhile without using up
// an attempt. Once echo has loaded, /healthz is ok, the webhook is served and the delivery sent.
func TestHealthLoadingBeforeThePluginsLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := echotest.New()
	t.Cleanup(fake.Close)
	cfg := defaultConfig(t)
	cfg.DataDir, cfg.PluginsDir, cfg.Listen, cfg.AdminListen = dir, filepath.Join(dir, "plugins"), "127.0.0.1:0", "127.0.0.1:0"
	cfg.CompilationCache = wasmbuild.CompilationCacheDir(t)
	cfg.Demo.Plugin = ""
	cfg.Plugins = map[string]config.Plugin{"echo": {EgressExtra: []string{"127.0.0.1"},
		Profiles: map[string]map[string]any{"main": {"outbox_url": fake.URL() + "/outbox"}},
		Access:   map[string]config.Access{"main": {AllowAll: true}}}}
	wasmbuild.CopyTo(t, "../../plugins/echo", filepath.Join(cfg.PluginsDir, "echo.wasm"))
	ctx, cancel := context.WithCancel(context.Background())
	g, err := Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// A notice pending from before the start: its lane starts before the plugins load.
	src := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: "45", UserID: "u1"}
	key, err := g.kernel.Key(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.ledger.Enqueue(ctx, delivery.Message{Plugin: "echo", Profile: "main", Key: key, Kind: delivery.KindNotice,
		Target: abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: "45", UserID: "u1"}, Text: "pending since the last run"}); err != nil {
		t.Fatal(err)
	}
	pending := func() delivery.Row {
		rows, err := g.ledger.List(ctx, delivery.Filter{KeyPrefix: key})
		if err != nil || len(rows) != 1 {
			t.Errorf("ledger rows %+v %v", rows, err)
			return delivery.Row{}
		}
		return rows[0]
	}

	type answer struct {
		code       int
		retryAfter string
		body       string
	}
	do := func(method, url, body string) answer {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{body: err.Error()}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
	}
	hook := func(public, id string) answer {
		return do("POST", "http://"+public+"/hooks/echo/main",
			fmt.Sprintf(`{"id": %q, "chat_id": "44", "chat_type": "dm", "user_id": "u1", "text": "early bird"}`, id))
	}
	var early, earlyHook answer
	var waited delivery.Row
	addrs := make(chan [2]string, 1)
	runDone := make(chan error, 1)
	// ready runs once both listeners serve and before the plugins are loaded: what a platform or
	// a probe sees in that moment.
	go func() {
		runDone <- g.Run(ctx, func(public, admin string) {
			early = do("GET", "http://"+admin+"/healthz", "")
			earlyHook = hook(public, "m-early")
			// The pending notice's lane has tried it, and it waits for echo.
			for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if waited = pending(); waited.Reason != "" {
					break
				}
			}
			addrs <- [2]string{public, admin}
		})
	}()
	defer func() { cancel(); <-runDone; g.Close() }()
	a := <-addrs
	var h health
	if err := json.Unmarshal([]byte(early.body), &h); err != nil || early.code != http.StatusOK ||
		h.Status != "loading" || h.Plugins != 0 || len(h.Loading) == 0 {
		t.Errorf("/healthz before the plugins loaded: %d %s, want 200 loading", early.code, early.body)
	}
	if earlyHook.code != http.StatusServiceUnavailable || earlyHook.retryAfter == "" {
		t.Errorf("webhook before its plugin loaded: %d (Retry-After %q) %s, want 503 with Retry-After",
			earlyHook.code, earlyHook.retryAfter, earlyHook.body)
	}
	if waited.State != delivery.Pending || waited.Attempts != 0 {
		t.Errorf("the pending notice before echo loaded: %+v, want pending without an attempt used", waited)
	}
	if t.Failed() {
		t.FailNow()
	}

	for deadline := time.Now().Add(testdeadline.Scale(time.Minute)); ; time.Sleep(20 * time.Millisecond) {
		got := do("GET", "http://"+a[1]+"/healthz", "")
		if err := json.Unmarshal([]byte(got.body), &h); err == nil && h.Status == "ok" && h.Plugins == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never ok: %d %s", got.code, got.body)
		}
	}
	// The platform's retry is served.
	if got := hook(a[0], "m-early"); got.code != http.StatusOK {
		t.Fatalf("webhook after echo loaded: %d %s", got.code, got.body)
	}
	if _, ok := fake.Wait(testdeadline.Scale(30*time.Second), echotest.Has("early bird")); !ok {
		t.Fatalf("no answer to the retried event; the platform got %+v", fake.Messages())
	}
	if _, ok := fake.Wait(testdeadline.Scale(30*time.Second), echotest.Has("pending since the last run")); !ok {
		t.Fatalf("the pending notice was not delivered; the platform got %+v", fake.Messages())
	}
	for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); pending().State != delivery.Delivered; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the notice is not recorded delivered: %+v", pending())
		}
	}
	if r := pending(); r.Attempts != 1 {
		t.Fatalf("the notice took %d attempts, want 1 (waiting for its plugin is not an attempt): %+v", r.Attempts, r)
	}
}
