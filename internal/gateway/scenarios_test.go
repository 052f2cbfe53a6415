package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// world is a whole host (real echo.wasm, real SQLite, real processes, the built-in agent) wired
// to a loopback echo platform.
type world struct {
	t    *testing.T
	g    *Gateway
	fake *echotest.Server
	srv  *httptest.Server
	n    atomic.Int64
	stop func() // stops the host (as at its end, idempotent); its processes go on running
}

// Tests whose worlds are independent (each its own data directory, database, platform fake and
// listeners) run side by side (t.Parallel). Some stay sequential, which Go runs before every
// parallel test of the package, never beside one: those that count the process's goroutines
// (goleak: TestOpenFailsWithoutLeaks, TestRunFailsWithoutLeaks), that set the environment
// (TestReadmeAgentExamples), and that time answers while plugins spin on every core
// (TestWebhookAnsweredWhileEverySendSpins, TestListenerAnswersWhilePluginsSpinAtLoad).
func newWorld(t *testing.T) *world { return newWorldWith(t, nil) }

// newWorldWith also loads the given extra plugins (file name → package dir → profile config).
func newWorldWith(t *testing.T, extra map[string]extraPlugin) *world {
	t.Helper()
	return newWorldOn(t, "", extra)
}

// newWorldOn is newWorldWith on the database source names (config store: "" for SQLite in the
// world's data directory, or a postgres:// URL).
func newWorldOn(t *testing.T, source string, extra map[string]extraPlugin) *world {
	t.Helper()
	fake := echotest.New()
	t.Cleanup(fake.Close)
	return newWorldFake(t, source, fake, extra)
}

// defaultConfig is the embedded defaults with the default call deadline scaled with the harness:
// a Go guest's runtime start-up under -race, with packages side by side on 2 cores, once took
// more than the default 10 s in CI, and describe failed the load.
func defaultConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limits.CallTimeout = config.Duration(testdeadline.Scale(time.Duration(cfg.Limits.CallTimeout)))
	return cfg
}

// newWorldFake is newWorldOn with echo's platform given: several hosts of one deployment talk to
// the same platform.
func newWorldFake(t *testing.T, source string, fake *echotest.Server, extra map[string]extraPlugin) *world {
	t.Helper()
	return newWorldConfigured(t, source, fake, extra, nil)
}

// newWorldConfigured is newWorldFake with the configuration changed by configure (if not nil)
// before the host opens.
func newWorldConfigured(t *testing.T, source string, fake *echotest.Server, extra map[string]extraPlugin, configure func(*config.Config)) *world {
	t.Helper()
	dir := t.TempDir()
	cfg := defaultConfig(t)
	cfg.DataDir, cfg.PluginsDir, cfg.Store = dir, filepath.Join(dir, "plugins"), source
	cfg.CompilationCache = wasmbuild.CompilationCacheDir(t) // compiled once for every test, not once per world
	cfg.Plugins = map[string]config.Plugin{"echo": {EgressExtra: []string{"127.0.0.1"},
		Profiles: map[string]map[string]any{"main": {"outbox_url": fake.URL() + "/outbox"}},
		Access:   map[string]config.Access{"main": {AllowAll: true, Tools: []string{config.ToolShell, config.ToolProcesses}}}}}
	cfg.Demo.Plugin = "" // echo's main profile talks to the fake here, not to the demo outbox
	wasmbuild.CopyTo(t, "../../plugins/echo", filepath.Join(cfg.PluginsDir, "echo.wasm"))
	for name, p := range extra {
		wasmbuild.CopyTo(t, p.dir, filepath.Join(cfg.PluginsDir, name+".wasm"))
		cfg.Plugins[name] = config.Plugin{Profiles: map[string]map[string]any{"main": p.config}, Limits: p.limits,
			EgressExtra: []string{"127.0.0.1"}, Access: map[string]config.Access{"main": {AllowAll: true}}}
	}
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, err := Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if rej := g.LoadPlugins(ctx); len(rej) > 0 {
		t.Fatal(rej)
	}
	if err := g.startCore(ctx, ctx); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, g: g, fake: fake, srv: httptest.NewServer(g.Handler())}
	var once sync.Once
	w.stop = func() { once.Do(func() { w.srv.Close(); cancel(); g.Close() }) }
	t.Cleanup(w.stop)
	return w
}

type extraPlugin struct {
	dir    string
	config map[string]any
	limits *config.Limits
}

// say sends a chat message through the echo plugin's webhook (the Wasm plugin parses it).
func (w *world) say(chat, thread, text string) {
	w.t.Helper()
	body, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("m%d", w.n.Add(1)), "chat_id": chat, "thread_id": thread,
		"chat_type": chatType(thread), "user_id": "u1", "text": text})
	resp, err := http.Post(w.srv.URL+"/hooks/echo/main", "application/json", strings.NewReader(string(body)))
	if err != nil {
		w.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		w.t.Fatalf("webhook %d", resp.StatusCode)
	}
}

func chatType(thread string) string {
	if thread != "" {
		return abi.ChatForum
	}
	return abi.ChatDM
}

func src(chat, thread string) abi.Source {
	return abi.Source{Platform: "echo", Profile: "main", ChatType: chatType(thread), ChatID: chat, ThreadID: thread, UserID: "u1"}
}

func (w *world) wait(what string, match func(echotest.Message) bool) echotest.Message {
	w.t.Helper()
	m, ok := w.fake.Wait(testdeadline.Scale(30*time.Second), match)
	if !ok {
		var texts []string
		for _, m := range w.fake.Messages() {
			texts = append(texts, m.Text)
		}
		w.t.Fatalf("timed out waiting for %s; the platform got %q", what, texts)
	}
	return m
}

func notice(sub string) func(echotest.Message) bool {
	return func(m echotest.Message) bool {
		return strings.Contains(m.Text, sub) && strings.Contains(m.Text, "Last lines")
	}
}

// spawn starts a notify-on-complete process stamped from s's current session, optionally with a
// doctored stamp (a legacy unstamped event, a forged route).
func (w *world) spawn(s abi.Source, cmd string, mutate func(*session.Stamp)) string {
	w.t.Helper()
	key, _ := w.g.kernel.Key(s)
	var id string
	err := w.g.kernel.WithBoundary(context.Background(), key, func(b *session.Boundary) error {
		st, err := b.Stamp(s)
		if err != nil {
			return err
		}
		if mutate != nil {
			mutate(&st)
		}
		res, err := w.g.procs.Spawn(b.Context(), process.SpawnRequest{Command: cmd, Stamp: st, NotifyOnComplete: true})
		id = res.ID
		return err
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *world) event(procID string) process.Record {
	w.t.Helper()
	for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		recs, _ := w.g.procs.Queue().Events(context.Background(), procID)
		if len(recs) > 0 && (recs[0].QueueState == "done" || recs[0].QueueState == "suppressed") {
			return recs[0]
		}
	}
	w.t.Fatalf("event of %s never handled", procID)
	return process.Record{}
}

func (w *world) rows(state delivery.State) []delivery.Row {
	rows, err := w.g.ledger.List(context.Background(), delivery.Filter{State: state})
	if err != nil {
		w.t.Fatal(err)
	}
	return rows
}

// The ten starred scenarios of hermes-gateway.md §7, through the real Wasm plugin, on SQLite
// and on PostgreSQL (several hosts' store).
func TestStarredScenarios(t *testing.T) {
	t.Parallel()
	storetest.Each(t, starredScenarios)
}

func starredScenarios(t *testing.T, backend storetest.Backend) {
	t.Run("1-new-drops-stale-completion", func(t *testing.T) {
		w := newWorldOn(t, backend.Fresh(t).Source, nil)
		w.say("1", "", "hi")
		w.wait("hello", func(m echotest.Message) bool { return true })
		id := w.spawn(src("1", ""), "sleep 0.5; echo s1-output", nil)
		w.say("1", "", "/new")
		rec := w.event(id)
		if !strings.Contains(rec.Outcome, "user_boundary") || w.fake.Count("s1-output") != 0 {
			t.Fatalf("outcome %q", rec.Outcome)
		}
		log, _ := w.g.procs.Log(context.Background(), id, 0, 100)
		if !strings.Contains(string(log.Data), "s1-output") {
			t.Fatal("the dropped process's output is not readable")
		}
		if len(w.rows(delivery.Dropped)) != 1 {
			t.Fatal("the drop was not recorded in the ledger")
		}
	})
	t.Run("2-non-user-end-delivers-to-current", func(t *testing.T) {
		w := newWorldOn(t, backend.Fresh(t).Source, nil)
		w.say("2", "", "hi")
		w.wait("hello", func(m echotest.Message) bool { return true })
		key, _ := w.g.kernel.Key(src("2", ""))
		old, _, _ := w.g.kernel.Current(context.Background(), key)
		id := w.spawn(src("2", ""), "sleep 0.5; echo idle-output", nil)
		w.g.kernel.EndSession(context.Background(), old.SessionID, session.EndIdle)
		w.say("2", "", "back")
		w.wait("the completion", notice("idle-output"))
		if rec := w.event(id); !strings.Contains(rec.Outcome, "queued") {
			t.Fatalf("outcome %q", rec.Outcome)
		}
	})
	t.Run("3-compression-continuation", func(t *testing.T) {
		w := newWorldOn(t, backend.Fresh(t).Source, nil)
		w.say("3", "", "hi")
		w.spawn(src("3", ""), "sleep 0.5; echo compressed-output", nil)
		w.say("3", "", "/compress")
		w.wait("the completion in the continuation", notice("compressed-output"))
	})
	// Scenario 4 (compression tip not visible yet) and 5 (store unavailable) cannot arise through
	// this host's transitions, which move the route and end the parent in one transaction; the
	// kernel's tests produce those states directly (internal/session classify and failure tests).
	t.Run("6-unstamped-delivers-by-route", func(t *testing.T) {
		w := newWorldOn(t, backend.Fresh(t).Source, nil)
		w.say("6", "", "hi")
		w.spawn(src("6", ""), "echo legacy-output", func(s *session.Stamp) { s.SessionID, s.Generation = "", 0 })
		w.wait("the legacy completion", notice("legacy-output"))
	})
	t.Run("7-topic-42-not-7", func(t *testing.T) {
		w := newWorldOn(t, backend.Fresh(t).Source, nil)
		w.say("-100", "42", "hi from 42")
		w.spawn(src("-100", "42"), "sleep 0.5; echo topic-output", nil)
		w.say("-100", "7", "now in topic 7")
		m := w.wait("the completion", notice("topic-output"))
		if m.ThreadID != "42" {
			t.Fatalf("delivered to thread %q", m.ThreadID)
		}
	})
	t.Run("8-key-mismatch-drops", func(t *testing.T) {
		w := newWorldOn(t, backend.Fresh(t).Source, nil)
		w.say("8", "", "hi")
		id := w.spawn(src("8", ""), "echo bleed-output", func(s *session.Stamp) { s.Route.ChatType, s.Route.ChatID = abi.ChatGroup, "-9" })
		if rec := w.event(id); !strings.Contains(rec.Outcome, session.ReasonKeyMismatch) {
			t.Fatalf("outcome %q", rec.Outcome)
		}
		if w.fake.Count("bleed-output") != 0 {
			t.Fatal("delivered across keys")
		}
	})
	t.Run("9-new-during-notification-turn", func(t *testing.T) {
		// The synthetic turn's answer is guarded by the generation captured when it started;
		// a /new between the turn and its send drops it (see internal/turn for the interleavings).
		w := newWorldOn(t, backend.Fresh(t).Source, nil)
		w.say("9", "", "hi")
		w.wait("hello", func(m echotest.Message) bool { return true })
		// Flood control holds the chat's lane (without holding its boundary) until released.
		w.fake.Throttle(true)
		w.say("9", "", "help")
		w.fake.WaitAttempt(testdeadline.Scale(30 * time.Second))
		id := w.spawn(src("9", ""), "echo pinned-output", nil)
		w.event(id) // became a notification turn, whose answer waits in the lane
		for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); ; time.Sleep(10 * time.Millisecond) {
			pending := false
			for _, r := range w.rows(delivery.Pending) {
				pending = pending || strings.Contains(r.Target.Text, "pinned-output")
			}
			if pending {
				break
			}
			if time.Now().After(deadline) {
				for _, r := range w.rows("") {
					t.Logf("%s %s %q %s %v", r.State, r.Kind, r.Target.Text, r.Reason, r.NextAttempt)
				}
				t.Fatal("the notification answer never queued")
			}
		}
		w.say("9", "", "/new")
		w.fake.Throttle(false)
		w.wait("the /new confirmation", func(m echotest.Message) bool { return strings.Contains(m.Text, "New conversation") })
		for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); ; time.Sleep(20 * time.Millisecond) {
			dropped := false
			for _, r := range w.rows(delivery.Dropped) {
				dropped = dropped || strings.Contains(r.Target.Text, "pinned-output")
			}
			if dropped {
				break
			}
			if time.Now().After(deadline) {
				for _, r := range w.rows("") {
					t.Logf("%s %s %q %s", r.State, r.Kind, r.Target.Text, r.Reason)
				}
				t.Fatalf("the notification answer was not dropped")
			}
		}
		if w.fake.Count("pinned-output") != 0 {
			t.Fatal("delivered after /new")
		}
	})
}
