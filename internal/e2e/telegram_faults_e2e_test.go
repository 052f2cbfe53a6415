package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/telegramtest"
)

// These tests run the real binary with the real telegram.wasm against a Bot API fake that is
// slow or answers ambiguously, and against a group that becomes a supergroup.

// pluginState reads the telegram plugin's state and last error from the admin API, and the
// profiles' problems.
func pluginState(t *testing.T, h *telegramHost) (state, lastError string, problems []string) {
	t.Helper()
	var out struct {
		Plugins []struct {
			Name      string              `json:"name"`
			State     string              `json:"state"`
			LastError string              `json:"last_error"`
			Profiles  map[string][]string `json:"profiles"`
		} `json:"plugins"`
	}
	adminRequest(t, "GET", h.admin, h.data, "/api/plugins", "", &out)
	for _, p := range out.Plugins {
		if p.Name == "telegram" {
			for _, pr := range p.Profiles {
				problems = append(problems, pr...)
			}
			return p.State, p.LastError, problems
		}
	}
	t.Fatalf("no telegram plugin in %+v", out)
	return "", "", nil
}

// crashes reads hermes_plugin_crashes_total for the telegram plugin from /metrics.
func crashes(t *testing.T, h *telegramHost) string {
	t.Helper()
	var body string
	adminRequest(t, "GET", h.admin, h.data, "/metrics", "", &body)
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "hermes_plugin_crashes_total{") && strings.Contains(l, `plugin="telegram"`) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

func count(texts []string, sub string) int {
	n := 0
	for _, s := range texts {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// TestTelegramSlowSends: five sendMessage calls to one chat, each answered only after 12 s (the
// call deadline is 10 s; the message is posted at once), come back as typed uncertain results: no
// crash, no breaker, each answer posted once and recorded "outcome unknown", and the chat told
// that its answer may not have arrived. Meanwhile another chat's messages keep being fetched and
// answered.
func TestTelegramSlowSends(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	slowUser := telegramtest.Person(301, "Slow")
	other := telegramtest.Person(302, "Other")
	th := startTelegram(t, func(tg *telegramtest.Server) {
		tg.AddPrivate(slowUser)
		tg.AddPrivate(other)
		for range 10 { // the answers, and the notices about them, are all slow
			tg.InjectFault("sendMessage", telegramtest.Slow(12*time.Second).ForChat(slowUser.ID))
		}
	})
	tg, bot := th.tg, th.bot
	// answers are the sendMessage requests to the slow chat that carry an answer (not a notice).
	answers := func() int {
		n := 0
		for _, r := range tg.Requests("sendMessage", slowUser.ID) {
			if strings.Contains(r.Params["text"], "I understood") {
				n++
			}
		}
		return n
	}
	start := time.Now()
	for i := range 5 {
		// One at a time: each answer is its own slow send (messages sent together would merge).
		bot.PrivateText(slowUser, fmt.Sprintf("slow %d", i))
		if err := tg.Wait(time.Minute, func() bool { return answers() == i+1 }); err != nil {
			t.Fatalf("send %d never reached Telegram: %v", i+1, err)
		}
		// Inbound keeps flowing while the slow chat's send is in flight.
		bot.PrivateText(other, fmt.Sprintf("still there %d?", i))
		if err := tg.Wait(time.Minute, func() bool { return count(tg.SentTexts(other.ID, 0), fmt.Sprintf("still there %d?", i)) == 1 }); err != nil {
			t.Fatalf("the other chat's message %d was not answered while Telegram was slow: %v", i, err)
		}
	}
	var rows []deliveryRow
	eventually(t, "five outcome-unknown answers", func() bool {
		rows = nil
		for _, r := range th.deliveries(t, "failed") {
			if r.Kind == "reply" {
				rows = append(rows, r)
			}
		}
		return len(rows) == 5
	})
	took := time.Since(start).Round(time.Second)
	for _, r := range rows {
		if !strings.Contains(r.Reason, "outcome unknown") {
			t.Errorf("row %s: %q, want outcome unknown", r.ID, r.Reason)
		}
	}
	if state, lastErr, _ := pluginState(t, th); state != "active" {
		t.Fatalf("plugin %s after slow sends: %s", state, lastErr)
	}
	if c := crashes(t, th); c != "" && !strings.HasSuffix(c, " 0") {
		t.Fatalf("crashes: %s", c)
	}
	// Each slow answer was posted once (the fake posted it before holding the answer back), never
	// resent; and the chat was told, in at least one notice.
	if got := count(tg.SentTexts(slowUser.ID, 0), "I understood"); got != 5 {
		t.Fatalf("slow chat holds %d answers, want 5: %q", got, tg.SentTexts(slowUser.ID, 0))
	}
	if n := answers(); n != 5 {
		t.Fatalf("%d answers sent to the slow chat, want 5 (none resent)", n)
	}
	eventually(t, "the slow chat to be told", func() bool { return count(tg.SentTexts(slowUser.ID, 0), "may not have arrived") > 0 })
	t.Logf("5 slow sends (answers after 12 s) recorded outcome unknown in %v; plugin active, no crash; the other chat answered 5 times meanwhile", took)
}

// TestTelegramSlowGetMeAtStart: getMe answers only after 11 s when the host starts (configure's
// deadline is 10 s). The profile is accepted and serves; poll learns the identity.
func TestTelegramSlowGetMeAtStart(t *testing.T) {
	ann := telegramtest.Person(303, "Ann")
	th := startTelegram(t, func(tg *telegramtest.Server) {
		tg.AddPrivate(ann)
		tg.InjectFault("getMe", telegramtest.Slow(11*time.Second))
	})
	if state, lastErr, problems := pluginState(t, th); state != "active" || len(problems) > 0 {
		t.Fatalf("plugin %s (%s), profile problems %q", state, lastErr, problems)
	}
	th.bot.PrivateText(ann, "help")
	if err := th.tg.Wait(time.Minute, func() bool { return count(th.tg.SentTexts(ann.ID, 0), "built-in agent") == 1 }); err != nil {
		t.Fatalf("no answer after a slow start: %v", err)
	}
	if n := len(th.tg.Requests("getMe", 0)); n < 2 {
		t.Fatalf("%d getMe requests: poll never learned the identity", n)
	}
}

// TestTelegramAmbiguousAnswers: a sendMessage that Telegram executed but whose 200 answer is
// unreadable is delivered once (never retried); one whose body is cut short of its length is
// posted once and recorded outcome unknown.
func TestTelegramAmbiguousAnswers(t *testing.T) {
	cut, short := telegramtest.Person(304, "Cut"), telegramtest.Person(305, "Short")
	th := startTelegram(t, func(tg *telegramtest.Server) {
		tg.AddPrivate(cut)
		tg.AddPrivate(short)
		tg.InjectFault("sendMessage", telegramtest.MalformedJSON().AfterEffect().ForChat(cut.ID))
		tg.InjectFault("sendMessage", telegramtest.TruncatedBody().AfterEffect().ForChat(short.ID))
	})
	th.bot.PrivateText(cut, "help")
	th.bot.PrivateText(short, "help")
	eventually(t, "both deliveries to be final", func() bool {
		return len(th.deliveries(t, "delivered")) == 1 && len(th.deliveries(t, "failed")) == 1
	})
	if got := th.tg.SentTexts(cut.ID, 0); len(got) != 1 {
		t.Fatalf("a 200 with a truncated body: posted %d times", len(got))
	}
	if got := th.tg.SentTexts(short.ID, 0); len(got) != 1 {
		t.Fatalf("a body cut short: posted %d times", len(got))
	}
	if n, m := len(th.tg.Requests("sendMessage", cut.ID)), len(th.tg.Requests("sendMessage", short.ID)); n != 1 || m != 1 {
		t.Fatalf("sendMessage requests %d and %d, want 1 each", n, m)
	}
	if f := th.deliveries(t, "failed"); !strings.Contains(f[0].Reason, "outcome unknown") {
		t.Fatalf("the cut body was recorded %q", f[0].Reason)
	}
}

// TestTelegramGroupMigration: a process started in a group notifies the supergroup the group
// became, and `ps` and the transcript there still show it: the supergroup continues the group's
// conversation. Once learned from the service messages Telegram sends, once only from the
// 400 "upgraded to a supergroup" answer of a send to the old group.
func TestTelegramGroupMigration(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)

	const group, super = int64(-4001), int64(-1004001)   // with service messages
	const group2, super2 = int64(-4002), int64(-1004002) // the 400 only
	ann := telegramtest.Person(306, "Ann")
	th := startTelegram(t, func(tg *telegramtest.Server) {
		tg.AddGroup(group, "Builds")
		tg.AddGroup(group2, "Deploys")
	})
	tg, bot := th.tg, th.bot
	procID := regexp.MustCompile(`proc_[0-9a-f]+`)
	waitText := func(chat int64, sub string) string {
		t.Helper()
		var hit string
		err := tg.Wait(time.Minute, func() bool {
			for _, s := range tg.SentTexts(chat, 0) {
				if strings.Contains(s, sub) {
					hit = s
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Fatalf("no %q in chat %d: %v; chat holds %q", sub, chat, err, tg.SentTexts(chat, 0))
		}
		return hit
	}

	for _, c := range []struct {
		group, super int64
		service      bool
	}{{group, super, true}, {group2, super2, false}} {
		tag := fmt.Sprintf("mig%d", -c.group)
		bot.GroupText(c.group, ann, "run sleep 3; echo "+tag+"-done")
		id := procID.FindString(waitText(c.group, "Started"))
		if id == "" {
			t.Fatal("no process id in the start confirmation")
		}
		if c.service {
			bot.Migration(c.group, c.super)
		} else {
			tg.MigrateGroup(c.group, c.super) // Telegram said nothing: only sends learn it
		}
		waitText(c.super, tag+"-done")

		bot.GroupText(c.super, ann, "ps")
		// The listing itself: the completion notice names the process too.
		if list := waitText(c.super, "Processes:\n"+id); !strings.Contains(list, tag) {
			t.Fatalf("ps in the supergroup: %q", list)
		}
		key := fmt.Sprintf("agent:main:telegram:group:%d:%d", c.group, ann.ID)
		out, err := runCLI(th.bin, th.data, "sessions", "show", key)
		if err != nil || !strings.Contains(out, "run sleep 3") || !strings.Contains(out, tag+"-done") || !strings.Contains(out, "ps") {
			t.Fatalf("the group's conversation does not continue in the supergroup (%v):\n%s", err, out)
		}
		if c.service { // the note is in the conversation of whoever sent the service message
			from := fmt.Sprintf("agent:main:telegram:group:%d:777000", c.group)
			if note, _ := runCLI(th.bin, th.data, "sessions", "show", from); !strings.Contains(note, "upgraded to a supergroup") {
				t.Fatalf("the upgrade is not recorded:\n%s", note)
			}
		}
		ls, _ := runCLI(th.bin, th.data, "sessions", "ls")
		if strings.Contains(ls, fmt.Sprint(c.super)) {
			t.Fatalf("the supergroup started conversations of its own:\n%s", ls)
		}
		if psOut, _ := runCLI(th.bin, th.data, "ps"); !strings.Contains(psOut, id) || !strings.Contains(psOut, key) {
			t.Fatalf("hermes-host ps:\n%s", psOut)
		}
	}
	// A turn that runs a while shows "typing" in the supergroup (telegram declares typing).
	bot.GroupText(super, ann, "sh sleep 2")
	if err := tg.Wait(time.Minute, func() bool { return len(tg.Actions(super)) > 0 }); err != nil {
		t.Fatalf("no typing while a 2 s turn ran: %v", err)
	}
}

// telegramHost is a running binary serving telegram.wasm against a fake.
type telegramHost struct {
	tg        *telegramtest.Server
	bot       *telegramtest.Bot
	bin, data string
	admin     string // the admin listener
}

// startTelegram runs the binary with telegram.wasm pointed at a fresh Bot API fake prepared by
// setup (before the host starts, so faults can meet the start-up).
func startTelegram(t *testing.T, setup func(*telegramtest.Server)) *telegramHost {
	t.Helper()
	return startTelegramWith(t, setup, openAccess)
}

// startTelegramWith is startTelegram with access as the main profile's authorization.
func startTelegramWith(t *testing.T, setup func(*telegramtest.Server), access string) *telegramHost {
	t.Helper()
	tg := telegramtest.New(t)
	setup(tg)
	h := &telegramHost{tg: tg, bot: tg.Bot()}
	h.bin, h.data, h.admin = serveTelegram(t, tg, access)
	return h
}

func (h *telegramHost) deliveries(t *testing.T, state string) []deliveryRow {
	t.Helper()
	var out struct{ Deliveries []deliveryRow }
	adminRequest(t, "GET", h.admin, h.data, "/api/deliveries?state="+state, "", &out)
	return out.Deliveries
}
