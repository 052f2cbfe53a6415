package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	st "github.com/hermes-host/hermes-host/conformance/slacktest"
)

const (
	slackGeneral = "C0GENERAL"
	slackAnn     = "U0ANN"
	secondTeam   = "T0SECOND"
	secondToken  = "xoxb-2-second-workspace"
)

// slackHost is the real binary with the real slack.wasm, its Events API Request URL pointed at
// by a fresh Slack fake (two workspaces with a #general of the same id).
type slackHost struct {
	s         *st.Server
	bin, data string
	addr      string
}

func startSlackHost(t *testing.T, extraYAML string, opts ...st.Option) *slackHost {
	t.Helper()
	return startSlackHostWith(t, "", extraYAML, opts...)
}

// startSlackHostWith is startSlackHost with topYAML (top-level configuration, e.g. the agent)
// in the host's configuration file too.
func startSlackHostWith(t *testing.T, topYAML, extraYAML string, opts ...st.Option) *slackHost {
	t.Helper()
	return startSlackHostAccess(t, topYAML, extraYAML, openAccess, opts...)
}

// startSlackHostAccess is startSlackHostWith with access (a YAML flow mapping) as the main
// profile's authorization.
func startSlackHostAccess(t *testing.T, topYAML, extraYAML, access string, opts ...st.Option) *slackHost {
	t.Helper()
	s := st.New(t, opts...)
	s.Team().AddChannel(slackGeneral, "general")
	s.Team().AddUser(slackAnn, "ann")
	two := s.AddTeam(secondTeam, "Second", secondToken)
	two.AddChannel(slackGeneral, "general")
	bin, plugins := buildHost(t)
	data := t.TempDir()
	cfg := filepath.Join(data, "hermes.yaml")
	os.WriteFile(cfg, []byte(topYAML+fmt.Sprintf(`
plugins:
  slack:
    egress_extra: ["127.0.0.1"]
%s    profiles:
      main:
        bot_token: "%s"
        signing_secret: "%s"
        api_base: "%s"
        workspaces: {%s: {bot_token: "%s"}}
    access:
      main: %s
`, extraYAML, st.DefaultBotToken, s.SigningSecret(), s.APIURL(), secondTeam, secondToken, access)), 0o600)
	addr, stop := startServe(t, bin, plugins, data, "--config", cfg)
	t.Cleanup(stop)
	s.SetRequestURL("http://" + addr + "/hooks/slack/main")
	return &slackHost{s: s, bin: bin, data: data, addr: addr}
}

func (h *slackHost) threadHas(team, thread, sub string) func() bool {
	return func() bool {
		for _, s := range h.s.PostedTexts(team, slackGeneral, thread) {
			if strings.Contains(s, sub) {
				return true
			}
		}
		return false
	}
}

func (h *slackHost) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	if err := h.s.Wait(60*time.Second, cond); err != nil {
		t.Fatalf("%s: %v\nposted: %+v", what, err, h.s.AllPosted())
	}
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

// TestSlackEndToEnd runs the real binary with the real slack.wasm against the Slack fake: a
// mention in a channel is answered in its thread; a process started from thread A notifies
// thread A while the user talks in thread B; after /new in thread A an old completion is dropped
// and recorded.
func TestSlackEndToEnd(t *testing.T) {
	h := startSlackHost(t, "")
	team := h.s.Team()
	if _, err := h.s.VerifyURL(); err != nil {
		t.Fatal(err)
	}

	a := team.Mention(slackGeneral, slackAnn, "help")
	h.waitFor(t, "the reply in thread A", h.threadHas(team.ID, a.TS, "built-in agent"))
	if top := h.s.Posted(team.ID, slackGeneral, "-"); len(top) != 0 {
		t.Fatalf("answered at the top level: %+v", top)
	}

	// The bot follows thread A: no mention needed there.
	team.Reply(slackGeneral, a.TS, slackAnn, "run sleep 1; echo slack-done-A")
	h.waitFor(t, "the start confirmation in A", h.threadHas(team.ID, a.TS, "Started"))
	b := team.Mention(slackGeneral, slackAnn, "hello from thread B")
	h.waitFor(t, "a reply in thread B", h.threadHas(team.ID, b.TS, "hello from thread B"))
	h.waitFor(t, "the completion in thread A", h.threadHas(team.ID, a.TS, "slack-done-A\n"))
	if h.threadHas(team.ID, b.TS, "slack-done-A\n")() {
		t.Fatal("the completion leaked into thread B")
	}

	team.Reply(slackGeneral, a.TS, slackAnn, "run sleep 2; echo slack-stale-output")
	h.waitFor(t, "the second start", h.threadHas(team.ID, a.TS, "slack-stale-output"))
	team.Reply(slackGeneral, a.TS, slackAnn, "!new") // Slack keeps /new for slash commands
	h.waitFor(t, "the /new confirmation", h.threadHas(team.ID, a.TS, "New conversation"))

	var dropped string
	eventually(t, "the stale completion to be recorded as dropped", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls", "--dropped", "--key", "agent:main:slack:group:"+team.ID+":"+slackGeneral+":"+a.TS)
		dropped = out
		return err == nil && strings.Contains(out, "stale: user_boundary")
	})
	t.Logf("deliveries ls --dropped:\n%s", dropped)
	for _, s := range h.s.PostedTexts(team.ID, slackGeneral, a.TS) {
		if strings.Contains(s, "slack-stale-output") && !strings.HasPrefix(s, "Started") {
			t.Fatalf("stale output posted: %q", s)
		}
	}
	// The bot's own posts came back as events and started nothing.
	for _, m := range h.s.AllPosted() {
		if strings.Contains(m.Text, "Unknown") {
			t.Fatalf("the bot answered itself: %q", m.Text)
		}
	}
}

// TestSlackInboundGuarantees: every signing negative is refused with 401 and dispatches
// nothing; an event Slack retries makes one turn; the same channel id in two workspaces makes
// two sessions.
func TestSlackInboundGuarantees(t *testing.T) {
	h := startSlackHost(t, "")
	team := h.s.Team()

	var forged []string
	for i, f := range st.Forgeries() {
		ts := fmt.Sprintf("1600000000.%06d", i+1)
		forged = append(forged, ts)
		env := team.Envelope(st.Event{Type: "app_mention", User: slackAnn, Text: team.MentionText("run echo forged"),
			Channel: slackGeneral, TS: ts, EventTS: ts, Team: team.ID})
		d, err := h.s.Forge(f, env)
		if err != nil || d.Status != 401 {
			t.Errorf("%v: answered %d %s %v, want 401", f, d.Status, d.Err, err)
		}
	}

	// A retried mention: the first delivery and two retries are acknowledged, one turn.
	p := team.Mention(slackGeneral, slackAnn, "help")
	if err := h.s.WaitAcked(30*time.Second, p.EventIDs...); err != nil {
		t.Fatal(err)
	}
	for _, id := range p.EventIDs {
		for i := 0; i < 2; i++ {
			if d, err := h.s.Retry(id, "http_timeout"); err != nil || !d.OK() {
				t.Fatalf("retry of %s: %+v %v", id, d, err)
			}
		}
	}
	h.waitFor(t, "the reply", h.threadHas(team.ID, p.TS, "built-in agent"))
	key := "agent:main:slack:group:" + team.ID + ":" + slackGeneral + ":" + p.TS
	out, err := runCLI(h.bin, h.data, "sessions", "show", key)
	if err != nil {
		t.Fatalf("sessions show: %v\n%s", err, out)
	}
	if n := strings.Count(out, " user      help"); n != 1 {
		t.Fatalf("the mention is in the transcript %d times (6 deliveries of one message):\n%s", n, out)
	}

	// The same channel id in the second workspace: another session, answered with that
	// workspace's token.
	two := h.s.Team(secondTeam)
	q := two.Mention(slackGeneral, slackAnn, "help")
	h.waitFor(t, "the reply in the second workspace", h.threadHas(secondTeam, q.TS, "built-in agent"))
	if got := h.s.Posted(secondTeam, slackGeneral, q.TS); got[0].Token != secondToken {
		t.Fatalf("second workspace answered with token %q", got[0].Token)
	}
	out, err = runCLI(h.bin, h.data, "sessions", "ls", "--key", "agent:main:slack:")
	if err != nil {
		t.Fatalf("sessions ls: %v\n%s", err, out)
	}
	for _, want := range []string{key, "agent:main:slack:group:" + secondTeam + ":" + slackGeneral + ":" + q.TS} {
		if !strings.Contains(out, want) {
			t.Fatalf("no session %s:\n%s", want, out)
		}
	}
	for _, ts := range forged {
		if strings.Contains(out, ts) {
			t.Fatalf("a forged event has a session (%s):\n%s", ts, out)
		}
	}
	if n := len(h.s.AllPosted()); n != 2 {
		t.Fatalf("%d posts, want the 2 replies (forgeries and retries answered nothing)", n)
	}
}

// TestSlackAckWhileSendsAreSlow measures how long the host takes to acknowledge Slack's webhook
// (the Events API waits 3 s, then retries) while the plugin's sends are slow: first while a send
// to the same thread is held by the fake, then while every send instance of the plugin (pool of
// 4) is held. Each held send answers when the test releases it (or at the plugin's 8 s timeout).
func TestSlackAckWhileSendsAreSlow(t *testing.T) {
	// No retries, and a patient fake: the test measures the host's answer time, however long.
	h := startSlackHost(t, "    limits: {pool_size: 4}\n", st.WithRetrySchedule(), st.WithAckTimeout(20*time.Second))
	team := h.s.Team()
	deliveredIn := func(p st.Posted) time.Duration {
		t.Helper()
		if err := h.s.Wait(30*time.Second, func() bool { return len(h.s.Deliveries(p.EventIDs[0])) > 0 }); err != nil {
			t.Fatal(err)
		}
		d := h.s.Deliveries(p.EventIDs[0])[0]
		if !d.OK() {
			t.Errorf("event %s not acknowledged: status %d %s after %v", d.EventID, d.Status, d.Err, d.Took)
		}
		return d.Took
	}

	// A send to thread A is held; the user writes in thread A again.
	h.s.InjectFault("chat.postMessage", st.Hold())
	a := team.Mention(slackGeneral, slackAnn, "help")
	h.waitFor(t, "the reply to be held", func() bool { return h.s.Held() == 1 })
	same := deliveredIn(team.Reply(slackGeneral, a.TS, slackAnn, "are you there?"))
	h.s.Release()
	h.waitFor(t, "the held reply", h.threadHas(team.ID, a.TS, "built-in agent"))
	h.waitFor(t, "the second reply", func() bool { return len(h.s.Posted(team.ID, slackGeneral, a.TS)) >= 2 })

	// Every send instance is held, in four other channels (the host sends to one chat at a time,
	// so four channels, not four threads of one); a fifth channel's mention arrives.
	h.s.InjectFault("chat.postMessage", st.Hold(), st.Hold(), st.Hold(), st.Hold())
	var channels []string
	for i := 1; i <= 5; i++ {
		channels = append(channels, team.AddChannel(fmt.Sprintf("C0BUSY%d", i), "busy"))
	}
	var roots []st.Posted
	for _, ch := range channels[:4] {
		roots = append(roots, team.Mention(ch, slackAnn, "help"))
	}
	h.waitFor(t, "four held replies", func() bool { return h.s.Held() == 4 })
	busy := deliveredIn(team.Mention(channels[4], slackAnn, "help"))
	h.s.Release()
	for i, r := range roots {
		h.waitFor(t, "a held reply", func() bool { return len(h.s.Posted(team.ID, channels[i], r.TS)) > 0 })
	}
	t.Logf("webhook acknowledged in %v with a send to the same thread held, %v with every send instance held",
		same.Round(time.Millisecond), busy.Round(time.Millisecond))
	if same >= 3*time.Second || busy >= 3*time.Second {
		// The host records inbound events without waiting on the chat's boundary, and keeps
		// instances for inbound calls that sends cannot take (issue 12, item 4); without that, a
		// held send delays the acknowledgement to the plugin's 8 s request timeout.
		t.Fatalf("acknowledged in %v (same thread) and %v (pool busy); Slack retries after 3 s", same, busy)
	}
}

// TestSlackFollowedThreadWithTheDoorsDefaults: with access as the README writes it (channels
// admitted, the door's require_mention at its default, true) and the plugin following threads,
// a plain reply in a thread the bot was mentioned in is answered, and !new typed there without a
// mention starts a new conversation: the old job's completion is then dropped, not posted.
func TestSlackFollowedThreadWithTheDoorsDefaults(t *testing.T) {
	h := startSlackHostAccess(t, "", "", `{allow_all: true, tools: [shell, processes], groups: {"*": {allow_all: true}}}`)
	team := h.s.Team()
	a := team.Mention(slackGeneral, slackAnn, "help")
	h.waitFor(t, "the reply to the mention", h.threadHas(team.ID, a.TS, "built-in agent"))
	team.Reply(slackGeneral, a.TS, slackAnn, "ps")
	h.waitFor(t, "the plain reply in the followed thread answered", h.threadHas(team.ID, a.TS, "No processes"))
	team.Reply(slackGeneral, a.TS, slackAnn, "run sleep 2; echo followed-stale-output")
	h.waitFor(t, "the job's start", h.threadHas(team.ID, a.TS, "Started"))
	team.Reply(slackGeneral, a.TS, slackAnn, "!new")
	h.waitFor(t, "!new honoured without a mention", h.threadHas(team.ID, a.TS, "New conversation"))
	eventually(t, "the old job's completion recorded as dropped", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls", "--dropped")
		return err == nil && strings.Contains(out, "stale: user_boundary")
	})
	for _, s := range h.s.PostedTexts(team.ID, slackGeneral, a.TS) {
		if strings.Contains(s, "followed-stale-output") && !strings.HasPrefix(s, "Started") {
			t.Fatalf("the old job's completion reached the new conversation: %q", s)
		}
	}
}

// TestSlackSlowSendHoldsOnlyItsThread: ten mentions in ten threads of one channel, with Slack
// holding its answer to each chat.postMessage (posted at once, answered only when the test says).
// Threads are conversations of their own, each with its own delivery lane: all ten replies are
// posted while every answer is still held, not one after another. (With a lane per channel the
// second reply waits for the first answer; the issue measured the last one 30 s late with 3 s
// answers.)
func TestSlackSlowSendHoldsOnlyItsThread(t *testing.T) {
	h := startSlackHostWith(t, "", "    limits: {pool_size: 12}\n")
	team := h.s.Team()
	for range 10 {
		h.s.InjectFault("chat.postMessage", st.Hold())
	}
	var threads []string
	for i := range 10 {
		threads = append(threads, team.Mention(slackGeneral, slackAnn, fmt.Sprintf("help %d", i)).TS)
	}
	all := func() bool {
		for _, th := range threads {
			if !h.threadHas(team.ID, th, "built-in agent")() {
				return false
			}
		}
		return true
	}
	h.waitFor(t, "all ten replies posted while every answer is held", func() bool { return all() && h.s.Held() == 10 })
	h.s.Release()
	eventually(t, "the ten deliveries recorded", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls")
		return err == nil && strings.Count(out, "delivered") == 10
	})
}
