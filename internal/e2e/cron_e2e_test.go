package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/telegramtest"
)

// The cron tests run the real binary with cron.wasm and telegram.wasm against the Bot API fake,
// on a test clock: the host reads the plugins' time from a file (serve --test-clock), so a test
// moves through a day of schedules without waiting.

// cronT0 is where the test clock starts: a Wednesday, midnight UTC.
var cronT0 = time.Date(2026, 6, 10, 0, 0, 0, 0, time.UTC)

type cronHost struct {
	t     *testing.T
	tg    *telegramtest.Server
	bot   *telegramtest.Bot
	bin   string
	plugs string
	data  string
	cfg   string
	clock string
	now   time.Time
	stop  func()
	pid   int
	admin string // the admin listener, for the cron CLI
}

// cronUTC is the cron plugin's configuration in most of the tests: profile main in UTC, with
// limits of its own.
const cronUTC = `  cron:
    limits: {memory_mib: 64, call_timeout: 60s, pool_size: 4, max_payload_kib: 4096}
    profiles:
      main: {timezone: UTC}
`

func startCronHost(t *testing.T, setup func(*telegramtest.Server)) *cronHost {
	return startCronHostWith(t, setup, "", cronUTC)
}

// startCronHostWith starts the host with top (top-level YAML, e.g. the agent) and cron (the
// cron plugin's part under plugins:) in its configuration.
func startCronHostWith(t *testing.T, setup func(*telegramtest.Server), top, cron string) *cronHost {
	t.Helper()
	h := &cronHost{t: t, tg: telegramtest.New(t), data: t.TempDir(), now: cronT0}
	setup(h.tg)
	h.bot = h.tg.Bot()
	h.bin, h.plugs = buildHost(t)
	h.cfg = filepath.Join(h.data, "hermes.yaml")
	h.clock = filepath.Join(h.data, "clock")
	h.configure(top, cron)
	h.set(cronT0)
	h.start()
	return h
}

// configure writes the host's configuration file (read at the next start).
func (h *cronHost) configure(top, cron string) {
	h.t.Helper()
	if err := os.WriteFile(h.cfg, []byte(fmt.Sprintf(`%s
plugins:
  telegram:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {token: "%s", api_base: "%s", require_mention: false}
    access:
      # Ann may talk to the agent in her DM and in the forum, and manage her chats' jobs.
      main: {users: ["111"], groups: {"-1001234": {require_mention: false}}, tools: [cron]}
%s`, top, h.bot.Token(), h.tg.URL(), cron)), 0o600); err != nil {
		h.t.Fatal(err)
	}
}

func (h *cronHost) start() {
	h.t.Helper()
	sh := serve(h.t, h.bin, h.plugs, h.data, "--config", h.cfg, "--test-clock", h.clock)
	h.stop, h.pid, h.admin = sh.Stop, sh.PID, sh.Admin
}

func (h *cronHost) kill9() {
	syscall.Kill(h.pid, syscall.SIGKILL)
	h.stop()
}

// set moves the host clock to t (written atomically: the host never reads half a time).
func (h *cronHost) set(t time.Time) {
	h.t.Helper()
	h.now = t
	tmp := h.clock + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(t.UnixMilli(), 10)), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, h.clock); err != nil {
		h.t.Fatal(err)
	}
}

func (h *cronHost) advance(d time.Duration) { h.set(h.now.Add(d)) }

// cron runs `hermes-host cron ARGS` against the running host's admin listener.
func (h *cronHost) cron(args ...string) (string, error) {
	return runCLI(h.bin, h.data, append(append([]string{"cron"}, args...), "--admin-listen", h.admin)...)
}

// jobs lists the jobs through the CLI (hermes-host cron ls --json).
func (h *cronHost) jobs() []abi.Job {
	h.t.Helper()
	out, err := h.cron("ls", "--json")
	if err != nil {
		h.t.Fatalf("cron ls: %v\n%s", err, out)
	}
	var js []abi.Job
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		h.t.Fatalf("cron ls --json: %v\n%s", err, out)
	}
	return js
}

func (h *cronHost) job(id string) abi.Job {
	h.t.Helper()
	for _, j := range h.jobs() {
		if j.ID == id {
			return j
		}
	}
	h.t.Fatalf("no job %s", id)
	return abi.Job{}
}

func (h *cronHost) waitFor(what string, cond func() bool) {
	h.t.Helper()
	if err := h.tg.Wait(60*time.Second, cond); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
}

var jobIDRE = regexp.MustCompile(`• ([0-9a-f]{12}) `)

// TestCronEndToEnd: a job created with /cron in a forum topic fires into that topic; after /new
// in the topic, the pinned job is recorded as stale (and paused), nothing is sent and the ledger
// says why; a member the operator did not admit is refused /cron at the door.
func TestCronEndToEnd(t *testing.T) {
	const forum = -1001234
	h := startCronHost(t, func(tg *telegramtest.Server) {
		tg.AddForum(forum, "Ops", telegramtest.Topic{ID: 42, Name: "plants"}, telegramtest.Topic{ID: 7, Name: "chat"})
	})
	ann := telegramtest.User{ID: 111, FirstName: "Ann", Username: "ann"}
	bob := telegramtest.User{ID: 222, FirstName: "Bob", Username: "bob"}
	topic := func(thread int64) func() []string { return func() []string { return h.tg.SentTexts(forum, thread) } }

	// Bob is not admitted: his /cron is refused at the door (recorded), and answered by nothing.
	h.bot.TopicText(forum, 7, bob, "/cron ls")
	eventually(t, "Bob's refusal in the auth log", func() bool {
		out, err := runCLI(h.bin, h.data, "auth", "log")
		return err == nil && strings.Contains(out, "/cron ls") && strings.Contains(out, "unknown_user")
	})

	h.bot.TopicText(forum, 42, ann, "/cron add --text every 5m | water the plants")
	h.waitFor("the confirmation in topic 42", func() bool { return count(topic(42)(), "Scheduled") == 1 })
	m := jobIDRE.FindStringSubmatch(strings.Join(topic(42)(), "\n"))
	if m == nil {
		t.Fatalf("no job id in %q", topic(42)())
	}
	id := m[1]
	if j := h.job(id); j.Origin == nil || j.Origin.ThreadID != "42" || j.Pin == nil || !*j.Pin || j.NextRunMs != cronT0.Add(5*time.Minute).UnixMilli() {
		t.Fatalf("job %+v", j)
	}

	h.advance(5 * time.Minute)
	h.waitFor("the first run in topic 42", func() bool { return count(topic(42)(), "water the plants") == 2 }) // the confirmation + the run
	if got := topic(7)(); len(got) != 0 {
		t.Fatalf("topic 7 got %q (the job leaked, or Bob was answered)", got)
	}

	h.bot.TopicText(forum, 42, ann, "/new")
	h.waitFor("the /new confirmation", func() bool { return count(topic(42)(), "New conversation") == 1 })
	h.advance(5 * time.Minute)
	eventually(t, "the pinned job to be recorded as stale", func() bool { return h.job(id).LastStatus == "stale" })
	j := h.job(id)
	if j.State != "paused" || !strings.Contains(j.LastError, "stale") {
		t.Fatalf("after /new: %+v", j)
	}
	h.advance(5 * time.Minute)
	time.Sleep(300 * time.Millisecond) // a tick that would send (the job is paused: it must not)
	if n := count(topic(42)(), "water the plants"); n != 2 {
		t.Fatalf("after /new the topic got %d messages about the plants, want the 2 from before", n)
	}
	eventually(t, "the stale delivery in the ledger", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls", "--dropped")
		return err == nil && strings.Contains(out, "water the plants") && strings.Contains(out, "stale")
	})

	// The chat sees the job paused, and resuming it there attaches it to the new conversation.
	h.bot.TopicText(forum, 42, ann, "/cron resume "+id)
	h.waitFor("the resume confirmation", func() bool { return count(topic(42)(), "Resumed") == 1 })
	h.advance(5 * time.Minute)
	h.waitFor("the run after resume", func() bool { return count(topic(42)(), "water the plants") == 4 }) // + the resume line
}

// TestCronKill9DuringRun: the host is killed while the platform holds the job's sendMessage
// (the message was posted, the answer not yet given); after the restart the slot is recorded as
// interrupted and not repeated, and the next slot is delivered once.
func TestCronKill9DuringRun(t *testing.T) {
	ann := telegramtest.User{ID: 111, FirstName: "Ann"}
	h := startCronHost(t, func(tg *telegramtest.Server) { tg.AddPrivate(ann) })
	out, err := h.cron("add", "--schedule", "*/5 * * * *", "--text", "kill-test", "--to", "telegram:111", "--name", "k9")
	if err != nil {
		t.Fatalf("cron add: %v\n%s", err, out)
	}
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	h.tg.InjectFault("sendMessage", telegramtest.Slow(time.Minute))
	h.advance(5 * time.Minute)
	h.waitFor("the job's sendMessage", func() bool { return len(h.tg.Requests("sendMessage", ann.ID)) == 1 })
	h.kill9()
	h.start()
	h.advance(time.Minute) // the same slot's window
	eventually(t, "the slot to be recorded as interrupted", func() bool { return h.job(id).LastStatus == "interrupted" })
	if n := len(h.tg.Requests("sendMessage", ann.ID)); n != 1 {
		t.Fatalf("the interrupted slot was sent %d times", n)
	}
	if n := count(h.tg.SentTexts(ann.ID, 0), "kill-test"); n != 1 {
		t.Fatalf("the chat shows the message %d times", n)
	}
	eventually(t, "the ledger to say outcome unknown", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls")
		return err == nil && strings.Contains(out, "kill-test") && strings.Contains(out, "outcome unknown")
	})
	h.advance(4 * time.Minute) // the next slot, 00:10
	h.waitFor("the next slot", func() bool { return count(h.tg.SentTexts(ann.ID, 0), "kill-test") == 2 })
	time.Sleep(300 * time.Millisecond)
	if n := len(h.tg.Requests("sendMessage", ann.ID)); n != 2 {
		t.Fatalf("%d sendMessage requests, want 2 (one per slot)", n)
	}
	if j := h.job(id); j.LastStatus != "ok" || j.Runs != 2 {
		t.Fatalf("after the next slot: %+v", j)
	}
}

// TestCron288SendsInADay: a */5 job driven through 24 hours of fake time, slot by slot, sends
// exactly 288 messages.
func TestCron288SendsInADay(t *testing.T) {
	ann := telegramtest.User{ID: 111, FirstName: "Ann"}
	h := startCronHost(t, func(tg *telegramtest.Server) { tg.AddPrivate(ann) })
	if out, err := h.cron("add", "--schedule", "*/5 * * * *", "--text", "beat", "--to", "telegram:111"); err != nil {
		t.Fatalf("cron add: %v\n%s", err, out)
	}
	sent := func() int { return count(h.tg.SentTexts(ann.ID, 0), "beat") }
	start := time.Now()
	for i := 1; i <= 288; i++ {
		h.advance(5 * time.Minute)
		if err := h.tg.Wait(30*time.Second, func() bool { return sent() >= i }); err != nil {
			t.Fatalf("slot %d (%s): %v", i, h.now.Format("15:04"), err)
		}
		if n := sent(); n != i {
			t.Fatalf("after slot %d: %d messages", i, n)
		}
	}
	h.advance(4 * time.Minute) // the next day's 00:05 is not due yet
	time.Sleep(300 * time.Millisecond)
	if n := sent(); n != 288 {
		t.Fatalf("24 fake hours of */5 sent %d messages, want 288", n)
	}
	t.Logf("24 fake hours (288 slots) in %v of real time", time.Since(start).Round(time.Millisecond))
}
