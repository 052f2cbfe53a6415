package sim

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/conformance/slacktest"
	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/conformance/yuanbaotest"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
	"github.com/hermes-host/hermes-host/internal/e2e/e2etest"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// chatSpec is one chat of the world, by the name schedules use.
type chatSpec struct {
	Name      string
	Strangers bool     // a stranger can write here (and is refused)
	Methods   []string // the platform calls its faults can strike
	Multi     bool     // present when several hosts share PostgreSQL
}

var allChats = []chatSpec{
	{"tg:dm1", true, []string{"sendMessage", "sendMessage", "editMessageText", "getUpdates"}, true},
	{"tg:dm2", false, []string{"sendMessage", "editMessageText"}, true},
	{"tg:dm3", false, []string{"sendMessage", "editMessageText"}, true},
	{"tg:topic11", true, []string{"sendMessage", "editMessageText"}, true},
	{"tg:topic12", false, []string{"sendMessage", "editMessageText"}, false},
	{"slack:th1", true, []string{"chat.postMessage", "chat.update"}, true},
	{"slack:th2", false, []string{"chat.postMessage", "chat.update"}, false},
	{"slack:dm1", true, []string{"chat.postMessage", "chat.update"}, false},
	{"echo:dm1", true, []string{"send"}, true},
	{"echo:dm2", false, []string{"send"}, true},
	{"echo:t1", false, []string{"send"}, true},
	{"yb:dm1", true, []string{"send"}, false},
}

// worldChats are the chats of a world of hosts hosts.
func worldChats(hosts int) []chatSpec {
	var out []chatSpec
	for _, c := range allChats {
		if hosts == 1 || c.Multi {
			out = append(out, c)
		}
	}
	return out
}

// The world's people and places.
var (
	tgAnn      = telegramtest.Person(7001, "Ann")
	tgBob      = telegramtest.Person(7002, "Bob")
	tgCat      = telegramtest.Person(7003, "Cat")
	tgEve      = telegramtest.Person(7099, "Eve") // not admitted
	tgForum    = int64(-1002000)
	slackChan  = "C0SIM"
	slackUsers = []string{"U0ANN", "U0BOB"}
	slackEve   = "U0EVE"
	ybAnn      = yuanbaotest.User{ID: "u_ann", Nick: "Ann"}
	ybEve      = yuanbaotest.User{ID: "u_eve", Nick: "Eve"}
)

// World is one run: the platform fakes, the model, the clock file and the hosts, and the
// record of what happened to them.
type World struct {
	tb    testing.TB
	sched *Schedule
	root  string
	dir   string
	pg    string // the PostgreSQL source; "" for SQLite
	db    *sql.DB

	tg        *telegramtest.Server
	tgBot     *telegramtest.Bot
	slack     *slacktest.Server
	team      *slacktest.Team
	slackD    string // the DM channel with slackUsers[0]
	slackEveD string // the DM channel with slackEve
	proxy     *httptest.Server
	echo      *echotest.Server
	yb        *yuanbaotest.Server
	ybBot     *yuanbaotest.Bot
	model     *agenttest.Server
	apiKey    string // the model's API key (agent.api_key): a secret no chat may see

	bin, plugins string
	clockFile    string
	hosts        []*host

	// Not under mu: fakes read the clock under their own locks.
	extra  atomic.Int64 // nonces handed out by faults that send messages (extraNonce)
	offset atomic.Int64 // the plugins' clock's lead over the wall clock, in ns

	mu      sync.Mutex // guards what follows, and the hosts' state; a leaf (no fake is called under it but to queue an event)
	rec     History
	threads map[string]string // slack chat name → its thread's ts
	faults  map[string]int    // injected, by kind
	// The events handed to the platforms, by platform id, with their index in rec.Inbound:
	// acceptance is read from each fake when the history is collected.
	pushes        []*yuanbaotest.Push
	pushIn        []int
	tgUpdates     []int64
	tgIn          []int
	slackEv       []string
	slackIn       []int
	slackEventsOf map[string][]string // the Slack event ids that carry each message (a mention comes twice)
	start         time.Time
}

// host is one hermes-host process of the world, across its restarts.
type host struct {
	i      int
	data   string
	config string
	proc   *e2etest.Host
	// Guarded by World.mu: whether it serves, its addresses and pid while it does (copied from
	// proc when it started, so readers never race a restart), and its current life.
	up               bool
	addr, admin, pid string
	life             int // index of its current HostLife in World.rec.Hosts
}

// KeepEnv names a directory where each world keeps its files (hosts' logs, data directories)
// after the test, instead of a temporary directory.
const KeepEnv = "HERMES_SIM_KEEP"

var (
	cacheOnce sync.Once
	cacheDir  string
)

// sharedCache is a wazero compilation cache every host of the test process links to, so a
// fresh data directory does not compile the plugins again.
func sharedCache() string {
	cacheOnce.Do(func() {
		cacheDir, _ = os.MkdirTemp("", "hermes-sim-cache-")
	})
	return cacheDir
}

// Cleanup removes what the package kept for the whole test process (call it from TestMain).
func Cleanup() {
	if cacheDir != "" {
		os.RemoveAll(cacheDir)
	}
	e2etest.Cleanup()
}

// NewWorld builds the world sched runs in and starts its hosts. Everything is stopped at tb's
// cleanup.
func NewWorld(tb testing.TB, sched *Schedule) *World {
	tb.Helper()
	dir := tb.TempDir()
	if keep := os.Getenv(KeepEnv); keep != "" {
		// The world's files (the hosts' logs and data) outlive the test, for a post-mortem.
		if err := os.MkdirAll(keep, 0o755); err != nil {
			tb.Fatal(err)
		}
		var err error
		if dir, err = os.MkdirTemp(keep, "run-"); err != nil {
			tb.Fatal(err)
		}
		tb.Logf("the world's files are kept in %s", dir)
	}
	w := &World{tb: tb, sched: sched, root: e2etest.Root(tb), dir: dir, threads: map[string]string{},
		faults: map[string]int{}, slackEventsOf: map[string][]string{}}
	if sched.Hosts > 1 {
		w.pg = storetest.Postgres(tb).Source
	}
	w.tg = telegramtest.New(tb)
	w.tgBot = w.tg.Bot()
	for _, u := range []telegramtest.User{tgAnn, tgBob, tgCat, tgEve} {
		w.tg.AddPrivate(u)
	}
	w.tg.AddForum(tgForum, "Sim", telegramtest.Topic{ID: 11, Name: "eleven"}, telegramtest.Topic{ID: 12, Name: "twelve"})
	w.slack = slacktest.New(tb, slacktest.WithRetrySchedule(0, time.Second, 3*time.Second), slacktest.WithClock(simClock{w}))
	w.team = w.slack.Team()
	w.team.AddChannel(slackChan, "sim")
	for _, u := range append(append([]string(nil), slackUsers...), slackEve) {
		w.team.AddUser(u, strings.ToLower(u[3:]))
	}
	w.slackD = w.team.AddDM(slackUsers[0])
	w.slackEveD = w.team.AddDM(slackEve)
	w.echo = echotest.New()
	tb.Cleanup(w.echo.Close)
	w.yb = yuanbaotest.New(tb, yuanbaotest.WithClock(w.now))
	w.ybBot = w.yb.Bot()
	w.model = agenttest.New(tb)
	w.model.Answer(modelReply)
	w.apiKey = fmt.Sprintf("sk-sim-%016x", sched.Seed^0x5ec7e7)
	w.rec.Secrets = []string{w.apiKey, w.tgBot.Token(), w.slack.SigningSecret(), slacktest.DefaultBotToken, w.ybBot.Secret()}

	// The plugins' clock is the wall clock plus the jumps so far (OpClock), written to the test
	// clock file every 100 ms; the Slack and Yuanbao fakes sign and check times on it too.
	w.clockFile = filepath.Join(w.dir, "clock")
	w.writeClock()
	start := w.now()
	w.rec.Clock = []ClockMove{{At: time.Now(), From: start, To: start}}
	clockDone := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-clockDone:
				return
			case <-t.C:
				w.writeClock()
			}
		}
	}()
	tb.Cleanup(func() { close(clockDone) })

	// Slack posts events to one Request URL: this proxy hands each to a host that is up.
	w.proxy = httptest.NewServer(http.HandlerFunc(w.toSlackHook))
	tb.Cleanup(w.proxy.Close)
	w.slack.SetRequestURL(w.proxy.URL + "/hooks/slack/main")

	w.bin = e2etest.Binary(tb)
	w.plugins = e2etest.Plugins(tb)
	for i := range sched.Hosts {
		h := &host{i: i, data: filepath.Join(w.dir, fmt.Sprintf("host%d", i))}
		if err := os.MkdirAll(h.data, 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.Symlink(sharedCache(), filepath.Join(h.data, "cache")); err != nil {
			tb.Fatal(err)
		}
		h.config = filepath.Join(h.data, "hermes.yaml")
		if err := os.WriteFile(h.config, []byte(w.configYAML()), 0o600); err != nil {
			tb.Fatal(err)
		}
		w.hosts = append(w.hosts, h)
	}
	tb.Cleanup(func() {
		for _, h := range w.hosts {
			if h.proc != nil {
				h.proc.Stop()
			}
		}
	})
	for _, h := range w.hosts {
		if err := w.startHost(h); err != nil {
			tb.Fatal(err)
		}
	}
	var err error
	if w.pg != "" {
		w.db, err = store.OpenSource(context.Background(), w.pg, w.dir, store.Options{MaxConns: 2})
	} else {
		w.db, err = store.Open(filepath.Join(w.hosts[0].data, "hermes.db"), store.Options{})
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.db.Close() })
	w.ready()
	return w
}

// configYAML is every host's configuration.
func (w *World) configYAML() string {
	store := ""
	if w.pg != "" {
		store = fmt.Sprintf("store: %q\n", w.pg)
	}
	tools := "tools: [shell, processes]"
	return store + fmt.Sprintf(`demo: {plugin: ""}
agent: {kind: openai, base_url: %q, api_key: %q, model: test-model, check: "off", timeout: 60s}
notifications: all
plugins:
  telegram:
    egress_extra: ["127.0.0.1"]
    limits: {pool_size: 2}   # few instances: a burst of slow sends makes the others wait for one
    profiles:
      main: {token: %q, api_base: %q, require_mention: false}
    access:
      main: {users: ["%d", "%d", "%d"], groups: {"%d": {users: ["%d", "%d"], require_mention: false}}, %s}
  slack:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {bot_token: %q, signing_secret: %q, api_base: %q}
    access:
      main: {users: [%s], groups: {%s: {users: [%s]}}, %s}
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "%s/outbox"}
    access:
      main: {users: [u1, u2], groups: {e3: {users: [u1, u2], require_mention: false}}, %s}
  yuanbao:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {app_id: %q, app_secret: %q, api_domain: %q, ws_url: %q}
    access:
      main: {users: [%s], %s}
  cron:
    profiles:
      main:
        jobs:
          - {name: simtick, schedule: "every 1m", text: "cron simtick", deliver: "echo:cron"}
`, w.model.URL, w.apiKey, w.tgBot.Token(), w.tg.URL(), tgAnn.ID, tgBob.ID, tgCat.ID, tgForum, tgAnn.ID, tgBob.ID, tools,
		slacktest.DefaultBotToken, w.slack.SigningSecret(), w.slack.APIURL(),
		strings.Join(slackUsers, ", "), slackChan, strings.Join(slackUsers, ", "), tools,
		w.echo.URL(), tools,
		w.ybBot.AppID(), w.ybBot.Secret(), w.yb.URL(), w.yb.WSURL(), ybAnn.ID, tools)
}

// startHost starts (or restarts) h and records a new life for it.
func (w *World) startHost(h *host) error {
	if h.proc == nil {
		h.proc = e2etest.New(w.bin, w.plugins, h.data, "--config", h.config, "--test-clock", w.clockFile)
		f, err := os.OpenFile(filepath.Join(w.dir, fmt.Sprintf("host%d.log", h.i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		var fmu sync.Mutex
		h.proc.Log = func(line string) {
			fmu.Lock()
			fmt.Fprintln(f, line)
			fmu.Unlock()
		}
		w.tb.Cleanup(func() { f.Close() })
	}
	if err := h.proc.Start(); err != nil {
		return fmt.Errorf("host %d: %w", h.i, err)
	}
	w.mu.Lock()
	h.up, h.addr, h.admin, h.pid = true, h.proc.Addr, h.proc.Admin, strconv.Itoa(h.proc.PID)
	h.life = len(w.rec.Hosts)
	w.rec.Hosts = append(w.rec.Hosts, HostLife{Host: h.i, Identity: h.pid, From: time.Now()})
	w.mu.Unlock()
	return nil
}

// ready waits until the platforms that hold a connection have it.
func (w *World) ready() {
	w.tb.Helper()
	if err := w.tgBot.WaitPolling(60 * time.Second); err != nil {
		w.tb.Fatalf("telegram never polled: %v", err)
	}
	if w.sched.Hosts == 1 {
		if err := w.yb.Wait(60*time.Second, w.ybBot.Connected); err != nil {
			w.tb.Fatalf("yuanbao never connected: %v", err)
		}
	}
}

// upHosts returns the public addresses of the hosts that are up.
func (w *World) upHosts() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, h := range w.hosts {
		if h.up {
			out = append(out, h.addr)
		}
	}
	return out
}

// toSlackHook forwards one Events API delivery to a host that is up (502 when none is).
func (w *World) toSlackHook(rw http.ResponseWriter, r *http.Request) {
	up := w.upHosts()
	if len(up) == 0 {
		http.Error(rw, "no host is up", http.StatusBadGateway)
		return
	}
	u, _ := url.Parse("http://" + up[int(time.Now().UnixNano())%len(up)])
	p := httputil.NewSingleHostReverseProxy(u)
	p.ErrorLog = log.New(io.Discard, "", 0) // a host killed mid-request: Slack sees a 502 and retries
	p.ServeHTTP(rw, r)
}

// now is the plugins' clock.
func (w *World) now() time.Time { return time.Now().Add(time.Duration(w.offset.Load())) }

// writeClock writes the plugins' clock to the test clock file (atomically).
func (w *World) writeClock() {
	tmp := w.clockFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(w.now().UnixMilli(), 10)), 0o600); err == nil {
		os.Rename(tmp, w.clockFile)
	}
}

// simClock is the plugins' clock as a fake's clock.
type simClock struct{ w *World }

func (c simClock) Now() time.Time { return c.w.now() }

func (w *World) logf(format string, args ...any) {
	w.tb.Helper()
	w.tb.Logf(format, args...)
}
