package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// TestSharedPostgres runs two, then three, real `hermes-host serve` processes against one
// PostgreSQL database, each with its own data directory and its own webhook address, with
// telegram.wasm polling the Bot API fake (64 chats) and echo.wasm receiving webhooks (16 chats,
// each event posted to one host and then again to another, as a platform retrying through
// another address would). The chats talk at once (background processes, /new and /compress at
// random, plain messages) while one host at a time is killed with SIGKILL and started again
// (the first kill is the host that polls, mid-poll). Then the hosts settle and the checker
// requires: 0 lost inbound events (every update the fake queued, and every webhook event a host
// accepted, has exactly one inbox row, ended), 0 duplicate messages (per Telegram chat, no more
// messages than the ledger delivered plus the sends whose outcome is unknown; no echo delivery
// posted twice), 0 deliveries into a left session and 0 silent drops (checkCompletions), and
// one getUpdates poller at a time: no 409 "terminated by other getUpdates request". Once during
// the run a host is paused past its leases (SIGSTOP, then SIGCONT): the others take its work over,
// and on resuming it writes nothing over what they did.
func TestSharedPostgres(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	if testing.Short() {
		t.Skip("multi-host run skipped in -short mode")
	}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("hosts=%d", n), func(t *testing.T) { sharedRun(t, n) })
	}
}

func sharedRun(t *testing.T, hosts int) {
	backend := storetest.Postgres(t)
	bin, plugins := buildHost(t)
	tg := telegramtest.New(t)
	bot := tg.Bot()
	const chats = 64
	users := make([]telegramtest.User, chats)
	for i := range users {
		users[i] = telegramtest.User{ID: int64(5000 + i), FirstName: fmt.Sprint("U", i)}
		tg.AddPrivate(users[i])
	}
	echo := echotest.New()
	defer echo.Close()
	type inst struct {
		data, cfg string
		pid       int
		stop      func()
		addr      string // the public listener (webhooks); "" while down; guarded by hmu
	}
	var hmu sync.Mutex
	insts := make([]*inst, hosts)
	start := func(h *inst) {
		sh := serve(t, bin, plugins, h.data, "--config", h.cfg)
		hmu.Lock()
		h.addr, h.stop, h.pid = sh.Addr, sh.Stop, sh.PID
		hmu.Unlock()
	}
	// upHosts returns the webhook addresses of the hosts that are up, in random order.
	upHosts := func(rng *rand.Rand) []string {
		hmu.Lock()
		defer hmu.Unlock()
		var out []string
		for _, h := range insts {
			if h != nil && h.addr != "" {
				out = append(out, h.addr)
			}
		}
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	for i := range insts {
		h := &inst{data: t.TempDir()}
		h.cfg = filepath.Join(h.data, "hermes.yaml")
		os.WriteFile(h.cfg, []byte(fmt.Sprintf(`
store: "%s"
demo: {plugin: ""}
agent: {stream: false}
plugins:
  telegram:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {token: "%s", api_base: "%s", require_mention: false}
    access:
      main: %s
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "%s/outbox"}
    access:
      main: {allow_all: true, tools: [shell, processes]}
`, backend.Source, bot.Token(), tg.URL(), openAccess, echo.URL())), 0o600)
		insts[i] = h
		start(h)
	}
	defer func() {
		for _, h := range insts {
			if h.addr != "" {
				h.stop()
			}
		}
	}()

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var (
		mu       sync.Mutex
		injected = map[int64]int{} // chat → updates queued
		total    int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(400+rng.IntN(1600)) * time.Millisecond):
				}
				bot.PrivateText(u, chaosText(rng, fmt.Sprint(i), n))
				mu.Lock()
				injected[u.ID]++
				total++
				mu.Unlock()
			}
		})
	}
	// Webhook chats: echo's platform posts each event to one host's webhook and then, as a
	// platform retrying through another address would, the same event to another host.
	const hookChats = 16
	accepted := map[string]bool{} // event ids some host answered 200; guarded by mu
	client := &http.Client{Timeout: 10 * time.Second}
	for c := range hookChats {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(500+c)))
			chat := fmt.Sprint("w", c)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(400+rng.IntN(1600)) * time.Millisecond):
				}
				id := fmt.Sprintf("%s-m%d", chat, n)
				body, _ := json.Marshal(map[string]string{"id": id, "chat_id": chat, "user_id": "u-" + chat, "text": chaosText(rng, chat, n)})
				ok, first := 0, ""
				for try := 0; ok < 2 && try < 100; try++ {
					hosts := upHosts(rng)
					if len(hosts) > 1 && hosts[0] == first {
						hosts = hosts[1:] // the second post goes to another host
					}
					if len(hosts) == 0 {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					resp, err := client.Post("http://"+hosts[0]+"/hooks/echo/main", "application/json", strings.NewReader(string(body)))
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							ok++
							first = hosts[0]
						}
					}
				}
				if ok > 0 {
					mu.Lock()
					accepted[id] = true
					mu.Unlock()
				}
			}
		})
	}

	db, err := store.OpenSource(context.Background(), backend.Source, t.TempDir(), store.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The first kill is the poller's host (the holder of its loop lease names its pid), mid-poll;
	// later ones are at random, mid-delivery or mid-turn as it happens.
	poller := func() *inst {
		var holder string
		db.QueryRow(`SELECT holder FROM leases WHERE name = 'loop:telegram/main'`).Scan(&holder)
		for _, h := range insts {
			if f := strings.Split(holder, ":"); len(f) == 3 && f[1] == fmt.Sprint(h.pid) {
				return h
			}
		}
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 1000))
	kills, pollerKills, pauses := 0, 0, 0
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end) || pauses == 0; {
		time.Sleep(time.Duration(3000+rng.IntN(3000)) * time.Millisecond)
		h := insts[rng.IntN(hosts)]
		if kills > 0 && pauses == 0 {
			// A host paused past its leases (SIGSTOP: a stop-the-world pause, a starved VM) while
			// it holds lanes, turns and processes: the others take them over, and when it resumes
			// (SIGCONT) it must write nothing over what they did.
			hmu.Lock()
			pid := h.pid
			hmu.Unlock()
			syscall.Kill(pid, syscall.SIGSTOP)
			time.Sleep(5*time.Second + 4*time.Second) // past the 5 s leases (internal/gateway hostTTL)
			syscall.Kill(pid, syscall.SIGCONT)
			pauses++
			continue
		}
		if p := poller(); p != nil && (kills == 0 || p == h) {
			h = p
			pollerKills++
		}
		hmu.Lock()
		pid, stop := h.pid, h.stop
		h.addr = ""
		hmu.Unlock()
		syscall.Kill(pid, syscall.SIGKILL)
		stop()
		kills++
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
		start(h)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d hosts, %d kills (%d of the poller's host), %d pause past the leases, %d updates queued over %d chats", hosts, kills, pollerKills, pauses, total, chats)
	if pollerKills == 0 {
		t.Error("no kill hit the poller's host")
	}
	// Every queued update reaches the inbox (the poller confirms an update only after recording it).
	var inbox int
	for deadline := time.Now().Add(testdeadline.Scale(90 * time.Second)); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		db.QueryRow(`SELECT COUNT(*) FROM turn_inbox WHERE plugin = 'telegram' AND kind <> 'notification'`).Scan(&inbox)
		if inbox >= total {
			break
		}
	}
	settle(t, db, 2*time.Minute)

	report := map[string]int{}
	lost := total - inbox
	if lost != 0 {
		t.Errorf("lost: %d of %d updates have no inbox row", lost, total)
	}
	var open, dupEvents int
	db.QueryRow(`SELECT COUNT(*) FROM turn_inbox WHERE state IN ('received', 'queued', 'running')`).Scan(&open)
	db.QueryRow(`SELECT COUNT(*) FROM (SELECT event_id FROM turn_inbox WHERE event_id IS NOT NULL
		GROUP BY plugin, profile, event_id HAVING COUNT(*) > 1) d`).Scan(&dupEvents)
	if open != 0 || dupEvents != 0 {
		t.Errorf("%d inbox rows never ended, %d events recorded twice", open, dupEvents)
		logOpenTurns(t, db)
	}
	dups := dupEvents
	// Per chat: what the fake shows against what the ledger says was, or may have been, sent.
	for _, u := range users {
		var delivered, unknown int
		chat := fmt.Sprint(u.ID)
		db.QueryRow(`SELECT COUNT(*) FROM deliveries WHERE plugin = 'telegram' AND chat_id = $1 AND state = 'delivered'`, chat).Scan(&delivered)
		db.QueryRow(`SELECT COUNT(*) FROM deliveries WHERE plugin = 'telegram' AND chat_id = $1 AND state = 'failed'`, chat).Scan(&unknown)
		got := len(tg.SentTexts(u.ID, 0))
		if got > delivered+unknown {
			dups += got - delivered - unknown
			t.Errorf("duplicate: chat %d shows %d messages, the ledger delivered %d (+%d failed)", u.ID, got, delivered, unknown)
		}
		if got < delivered {
			t.Errorf("chat %d shows %d messages, the ledger says %d were delivered", u.ID, got, delivered)
		}
		report["messages at the fake"] += got
		report["failed (outcome unknown)"] += unknown
	}
	// The webhook events: each recorded once, though posted to two hosts, and each delivery
	// reached echo's platform at most once.
	for id := range accepted {
		var n int
		db.QueryRow(`SELECT COUNT(*) FROM turn_inbox WHERE plugin = 'echo' AND event_id = $1`, id).Scan(&n)
		if n != 1 {
			lost++
			t.Errorf("webhook event %s has %d inbox rows", id, n)
		}
	}
	report["webhook events"] = len(accepted)
	seenDelivery := map[string]int{}
	for _, m := range echo.Messages() {
		seenDelivery[m.DeliveryID]++
	}
	for id, n := range seenDelivery {
		if n > 1 || echo.Attempts(id) > 1 {
			dups++
			t.Errorf("duplicate: delivery %s reached echo's platform %d times (%d attempts)", id, n, echo.Attempts(id))
		}
	}
	report["messages at echo's platform"] = len(seenDelivery)
	cdups, silent, left := checkCompletions(t, db, report)
	dups += cdups
	// One poller at a time: a second getUpdates while one is parked ends the parked one with
	// 409. A host killed while its poll was parked leaves it parked at the fake until the next
	// poller arrives, so each kill may account for one.
	conflicts := 0
	for _, r := range tg.Requests("getUpdates", 0) {
		if r.Status == 409 {
			conflicts++
		}
	}
	if conflicts > kills+pauses {
		t.Errorf("%d getUpdates answered 409 (concurrent pollers) in a run with %d kills", conflicts, kills)
	}
	t.Logf("checker: %d lost, %d duplicates, %d into a left session, %d silent drops, %d poll conflicts (%d kills); %v",
		lost, dups, left, silent, conflicts, kills, report)
	if report["completion delivered"] == 0 {
		t.Errorf("the run exercised too little: %v", report)
	}
}
