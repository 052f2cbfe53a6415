package e2e

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// The cron tests in test time (serve --test-clock): months of downtime, the two DST days of
// Europe/Berlin, a chat's targets, the agent turn's deadline and a pending delivery.

// tickLatency reads the cron plugin's tick latency histogram from /metrics (this process's):
// how many ticks there were, and how many took at most a second.
func (h *cronHost) tickLatency() (ticks, withinASecond int) {
	h.t.Helper()
	var body string
	if code := adminRequest(h.t, http.MethodGet, h.admin, h.data, "/metrics", "", &body); code != http.StatusOK {
		h.t.Fatalf("/metrics: %d", code)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `export="tick"`) || !strings.Contains(line, `plugin="cron"`) {
			continue
		}
		f := strings.Fields(line)
		n, _ := strconv.Atoi(f[len(f)-1])
		switch {
		case strings.HasPrefix(line, "hermes_plugin_call_seconds_count{"):
			ticks = n
		case strings.HasPrefix(line, "hermes_plugin_call_seconds_bucket{") && strings.Contains(line, `le="1"`):
			withinASecond = n
		}
	}
	return ticks, withinASecond
}

// TestCronMonthsOfDowntime: jobs every minute, every five minutes and daily (Europe/Berlin) run,
// the host is stopped, and starts again seven months later (both DST changes missed): each job
// catches up exactly once, for its latest slot, then continues on its schedule; the scheduler
// may tick before the platform plugin has loaded, and its catch-up then waits for it. Seven more
// months pass while the host runs: again one catch-up each, and no tick takes over a second.
// (The catch-up used to be repeated once per 10 000 slots stepped, each tick taking seconds:
// with two */5 jobs every tick ran past its deadline until the crash breaker stopped the
// profile.)
func TestCronMonthsOfDowntime(t *testing.T) {
	ann := telegramtest.User{ID: 111, FirstName: "Ann"}
	h := startCronHost(t, func(tg *telegramtest.Server) { tg.AddPrivate(ann) })
	for _, j := range [][2]string{{"minute", "* * * * *"}, {"five", "*/5 * * * *"}, {"daily", "daily at 7am"}} {
		if out, err := h.cron("add", "--schedule", j[1], "--text", j[0], "--name", j[0], "--tz", "Europe/Berlin", "--to", "telegram:111"); err != nil {
			t.Fatalf("cron add %s: %v\n%s", j[0], err, out)
		}
	}
	sent := func(name string) int { return count(h.tg.SentTexts(ann.ID, 0), name) }
	counts := func() [3]int { return [3]int{sent("minute"), sent("five"), sent("daily")} }
	h.advance(5 * time.Minute)
	h.waitFor("the first runs", func() bool { return sent("minute") == 1 && sent("five") == 1 })

	// down: after the jump to back (a restart, or while running), each job catches up once and
	// then runs on its schedule: the minute job's next slot is awaited.
	down := func(back time.Time, restart bool) {
		t.Helper()
		before := counts()
		if restart {
			h.stop()
			h.set(back)
			h.start()
		} else {
			h.set(back)
		}
		h.waitFor("one catch-up per job", func() bool {
			c := counts()
			return c[0] >= before[0]+1 && c[1] >= before[1]+1 && c[2] >= before[2]+1
		})
		h.advance(40 * time.Second) // back is at :30: the minute job's next slot, on its schedule
		h.waitFor("the minute job's next slot", func() bool { return sent("minute") >= before[0]+2 })
		if c := counts(); c != [3]int{before[0] + 2, before[1] + 1, before[2] + 1} {
			t.Fatalf("back on %v: minute, five, daily sent %v, having sent %v; want one catch-up each and the minute job's next slot", back, c, before)
		}
		want := map[string]time.Time{"minute": back.Truncate(time.Minute).Add(2 * time.Minute), "five": back.Truncate(5 * time.Minute).Add(5 * time.Minute)}
		for _, j := range h.jobs() {
			if w, ok := want[j.Name]; j.LastStatus != "ok" || (ok && j.NextRunMs != w.UnixMilli()) {
				t.Errorf("%s: last %q, next %v; want ok, next %v", j.Name, j.LastStatus, time.UnixMilli(j.NextRunMs).UTC(), w)
			}
		}
	}
	down(time.Date(2027, 1, 9, 12, 17, 30, 0, time.UTC), true) // 13:17:30 CET, seven months on
	eventually(t, "the plugins loaded", func() bool {
		var health map[string]any
		adminRequest(t, http.MethodGet, h.admin, h.data, "/healthz", "", &health)
		return health["status"] == "ok"
	})
	ticks0, fast0 := h.tickLatency()
	down(time.Date(2027, 8, 9, 12, 17, 30, 0, time.UTC), false) // seven months more, running
	ticks, fast := h.tickLatency()
	if ticks == ticks0 || fast-fast0 != ticks-ticks0 {
		t.Fatalf("%d ticks after the second downtime, %d of them within a second", ticks-ticks0, fast-fast0)
	}
	t.Logf("%d ticks after the second downtime, all within a second", ticks-ticks0)
}

// TestCronDSTDaysBerlin drives a */5 job and a daily 02:30 job (Europe/Berlin) through both DST
// days of 2026 slot by slot, as plugins/cron/README.md describes them: */5 runs by elapsed time,
// 276 times on the 23-hour spring day and 300 on the 25-hour autumn day; 02:30, which does not
// exist in spring, runs when the gap ends (03:00 CEST), and in autumn, when it happens twice, at
// its first occurrence only. Between the days the clock jumps seven months: each job catches up
// once.
func TestCronDSTDaysBerlin(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	ann := telegramtest.User{ID: 111, FirstName: "Ann"}
	h := startCronHost(t, func(tg *telegramtest.Server) { tg.AddPrivate(ann) })
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	springStart := time.Date(2026, 3, 29, 0, 0, 0, 0, berlin) // 23:00Z the day before
	h.set(springStart.Add(-30 * time.Second))
	ids := map[string]string{}
	for _, j := range [][2]string{{"five", "*/5 * * * *"}, {"half-two", "30 2 * * *"}} {
		out, err := h.cron("add", "--schedule", j[1], "--text", j[0], "--name", j[0], "--tz", "Europe/Berlin", "--to", "telegram:111")
		if err != nil {
			t.Fatalf("cron add %s: %v\n%s", j[0], err, out)
		}
		ids[j[0]] = strings.Fields(strings.Split(out, "\n")[1])[0]
	}
	sent := func(name string) int { return count(h.tg.SentTexts(ann.ID, 0), name) }
	// day moves the clock through the local day that begins at start, five minutes of real time
	// at a time, and awaits the */5 job's run at each step (a step without one times out). It
	// returns the */5 runs of the day and the 02:30 job's runs and last run (when it ran: the
	// clock stands on each slot, so the run's time is the slot's).
	day := func(start time.Time) (fives, halfTwos int, halfTwoAt time.Time) {
		t.Helper()
		f0, h0, runs0 := sent("five"), sent("half-two"), h.job(ids["half-two"]).Runs
		date := start.In(berlin).Format(time.DateOnly)
		for at := start; at.In(berlin).Format(time.DateOnly) == date; at = at.Add(5 * time.Minute) {
			h.set(at)
			fives++
			if err := h.tg.Wait(30*time.Second, func() bool { return sent("five") >= f0+fives }); err != nil {
				t.Fatalf("slot %d (%s, %s): %v", fives, at.UTC().Format(time.RFC3339), at.In(berlin).Format("15:04 MST"), err)
			}
			if n := sent("five") - f0; n != fives {
				t.Fatalf("at slot %d (%s): %d runs of */5 this day", fives, at.In(berlin).Format("15:04 MST"), n)
			}
		}
		j := h.job(ids["half-two"])
		if n := sent("half-two") - h0; n != j.Runs-runs0 {
			t.Errorf("the 02:30 job ran %d times and sent %d messages", j.Runs-runs0, n)
		}
		return sent("five") - f0, j.Runs - runs0, time.UnixMilli(j.LastRunMs).UTC()
	}
	began := time.Now()
	fives, halfTwos, at := day(springStart)
	if want := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC); fives != 276 || halfTwos != 1 || !at.Equal(want) {
		t.Errorf("spring day (23 h): */5 ran %d times, 02:30 %d times, last at %v; want 276, once at %v (03:00 CEST)", fives, halfTwos, at, want)
	}
	// Seven months on, the evening before the autumn day: one catch-up each.
	f0, h0 := sent("five"), sent("half-two")
	autumnStart := time.Date(2026, 10, 25, 0, 0, 0, 0, berlin) // 22:00Z the day before
	h.set(autumnStart.Add(-30 * time.Second))
	h.waitFor("one catch-up each", func() bool { return sent("five") >= f0+1 && sent("half-two") >= h0+1 })
	if f, hh := sent("five")-f0, sent("half-two")-h0; f != 1 || hh != 1 {
		t.Fatalf("the catch-up after seven months: */5 %d, 02:30 %d; want one each", f, hh)
	}
	for name, want := range map[string]time.Time{"five": autumnStart, "half-two": time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)} {
		if j := h.job(ids[name]); j.NextRunMs != want.UnixMilli() {
			t.Fatalf("after the catch-up %s's next slot is %v, want %v", name, time.UnixMilli(j.NextRunMs).UTC(), want.UTC())
		}
	}
	fives, halfTwos, at = day(autumnStart)
	if want := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC); fives != 300 || halfTwos != 1 || !at.Equal(want) {
		t.Errorf("autumn day (25 h): */5 ran %d times, 02:30 %d times, last at %v; want 300, once at %v (its first occurrence, 02:30 CEST)", fives, halfTwos, at, want)
	}
	t.Logf("both DST days (%d slots) in %v of real time", 276+300, time.Since(began).Round(time.Millisecond))
}

// TestCronChatTargets: a chat user's /cron add --to another chat is refused with a message that
// says why and what the operator can grant; the chat's own other thread is accepted and
// delivered; a target on a platform no plugin serves is refused when the job is created, from
// the CLI too.
func TestCronChatTargets(t *testing.T) {
	const forum = -1001234
	ann := telegramtest.User{ID: 111, FirstName: "Ann", Username: "ann"}
	h := startCronHost(t, func(tg *telegramtest.Server) {
		tg.AddPrivate(ann)
		tg.AddForum(forum, "Ops", telegramtest.Topic{ID: 42, Name: "plants"}, telegramtest.Topic{ID: 7, Name: "chat"})
	})
	dm := func() []string { return h.tg.SentTexts(ann.ID, 0) }
	h.bot.PrivateText(ann, "/cron add --text --to telegram:-1001234:42 every 5m | into the forum")
	h.waitFor("the refusal in Ann's DM", func() bool { return count(dm(), "posts only into this chat") == 1 })
	if got := strings.Join(dm(), "\n"); !strings.Contains(got, "telegram:-1001234:42") || !strings.Contains(got, "chat_targets") {
		t.Fatalf("the refusal does not say which target or what may grant it: %q", got)
	}
	h.bot.TopicText(forum, 42, ann, "/cron add --text --to telegram:-1001234:7 every 5m | into topic 7")
	h.waitFor("the confirmation in topic 42", func() bool { return count(h.tg.SentTexts(forum, 42), "Scheduled") == 1 })
	for _, to := range []string{"slack:C0123", "yuanbao:9"} {
		out, err := h.cron("add", "--schedule", "every 5m", "--text", "x", "--to", to)
		if err == nil || !strings.Contains(out, "no platform plugin serves") {
			t.Fatalf("cron add --to %s: %v\n%s", to, err, out)
		}
	}
	h.advance(5 * time.Minute)
	h.waitFor("the job's run in topic 7", func() bool { return count(h.tg.SentTexts(forum, 7), "into topic 7") == 1 })
	if js := h.jobs(); len(js) != 1 {
		t.Fatalf("%d jobs, want the one accepted: %+v", len(js), js)
	}
	if n := count(h.tg.SentTexts(forum, 42), "into the forum"); n != 0 {
		t.Fatalf("the refused job posted into the forum %d times", n)
	}
}

// TestCronAgentTurnDeadline: a prompt job whose agent turn takes 4 s, with the hosts' default
// call deadline lowered to 3 s. Configured as plugins/cron/README.md shows (profiles, no limits),
// the cron plugin keeps its embedded 150 s deadline and the run succeeds (the file's cron
// settings used to replace the defaults' whole, limits included). With its own call_timeout of
// 3 s, the deadline stops the run, and the job says so instead of "the host stopped".
func TestCronAgentTurnDeadline(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	ann := telegramtest.User{ID: 111, FirstName: "Ann"}
	model := agenttest.New(t)
	slow := func(w http.ResponseWriter, r *http.Request, req agenttest.Request) {
		select {
		case <-time.After(4 * time.Second):
		case <-r.Context().Done():
			return
		}
		agenttest.Text("the build is green")(w, r, req)
	}
	model.Push(slow, slow)
	top := modelYAML(model) + "limits: {memory_mib: 64, call_timeout: 3s, pool_size: 4, max_payload_kib: 4096}\n"
	readme := "  cron:\n    profiles:\n      main: {timezone: UTC}\n"
	h := startCronHostWith(t, func(tg *telegramtest.Server) { tg.AddPrivate(ann) }, top, readme)
	out, err := h.cron("add", "--schedule", "every 5m", "--prompt", "how is the build?", "--name", "build", "--to", "telegram:111")
	if err != nil {
		t.Fatalf("cron add: %v\n%s", err, out)
	}
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	h.advance(5 * time.Minute)
	h.waitFor("the agent's answer", func() bool { return count(h.tg.SentTexts(ann.ID, 0), "the build is green") == 1 })
	eventually(t, "the run recorded ok", func() bool { return h.job(id).LastStatus == "ok" })

	h.stop()
	h.configure(top, "  cron:\n    limits: {call_timeout: 3s}\n    profiles:\n      main: {timezone: UTC}\n")
	h.start()
	h.advance(5 * time.Minute) // 00:10: the run the deadline stops
	eventually(t, "the model's second request", func() bool { return len(model.Chats()) == 2 })
	h.advance(time.Minute) // the tick after the crash
	eventually(t, "the run recorded as interrupted", func() bool { return h.job(id).LastStatus == "interrupted" })
	j := h.job(id)
	if !strings.Contains(j.LastError, "took longer than its call deadline of 3s") || strings.Contains(j.LastError, "host stopped") {
		t.Fatalf("the interrupted run says %q; want the call deadline of 3s named", j.LastError)
	}
	if n := count(h.tg.SentTexts(ann.ID, 0), "the build is green"); n != 1 {
		t.Fatalf("%d answers sent, want the first run's only", n)
	}
}

// TestCronPendingReconciled: the platform answers a job's message with a flood wait of 6 s, so
// the ledger sends it again after longer than hermes_send waits, and the run is recorded
// pending; once the ledger has delivered it, the next tick asks the host and records the run ok.
func TestCronPendingReconciled(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	ann := telegramtest.User{ID: 111, FirstName: "Ann"}
	h := startCronHost(t, func(tg *telegramtest.Server) { tg.AddPrivate(ann) })
	out, err := h.cron("add", "--schedule", "every 5m", "--text", "slow-send", "--to", "telegram:111")
	if err != nil {
		t.Fatalf("cron add: %v\n%s", err, out)
	}
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	h.tg.InjectFault("sendMessage", telegramtest.FloodWait(6))
	h.advance(5 * time.Minute)
	eventually(t, "the run recorded pending", func() bool { return h.job(id).LastStatus == "pending" })
	eventually(t, "the ledger's delivery", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); err == nil && len(f) > 1 && strings.Contains(line, "slow-send") && f[1] == "delivered" {
				return true
			}
		}
		return false
	})
	h.advance(time.Minute) // the next tick asks
	eventually(t, "the run reconciled", func() bool { return h.job(id).LastStatus == "ok" })
	if j := h.job(id); j.Runs != 1 || j.LastError != "" {
		t.Fatalf("after reconciling: %+v", j)
	}
	if n := len(h.tg.Requests("sendMessage", ann.ID)); n != 2 {
		t.Fatalf("%d sendMessage requests, want 2 (the flood-waited one and its retry; asking sends nothing)", n)
	}
}
