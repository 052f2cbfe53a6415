package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dt "github.com/hermes-host/hermes-host/conformance/discordtest"
	"github.com/hermes-host/hermes-host/internal/e2e/e2etest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

const (
	dcGeneral = "5000000000000000001"
	dcThreadA = "5000000000000000002"
	dcThreadB = "5000000000000000003"
)

// discordHost is the real binary serving discord.wasm against a Discord fake, under
// strict_egress, with the fake's two addresses standing in for discord.com and
// gateway.discord.gg (so the plugin's egress scopes hold).
type discordHost struct {
	t         *testing.T
	d         *dt.Server
	bin, data string
	admin     string
}

// dcAccess admits everyone on the main profile, with tools, and leaves the guild channels'
// mention rule at its default (a mention needed): the host's gate and the plugin's must agree.
const dcAccess = `{allow_all: true, tools: [shell, processes], groups: {"*": {allow_all: true}}}`

func startDiscordHost(t *testing.T) *discordHost {
	t.Helper()
	d := dt.New(t)
	d.AddChannel(d.Guild(), dcGeneral, "general")
	// discord.wasm alone: a host compiles each plugin at its first start, and the others are not
	// needed here (on a loaded machine six compilations took most of a minute).
	bin, plugins := hostBinary(t), e2etest.Plugins(t, "discord")
	h := &discordHost{t: t, d: d, bin: bin, data: t.TempDir()}
	cfg := filepath.Join(h.data, "hermes.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
strict_egress: true
plugins:
  discord:
    egress_alias: {"%s": discord.com, "%s": gateway.discord.gg}
    profiles:
      main: {bot_token: "%s", api_base: "%s", gateway_url: "%s"}
    access:
      main: %s
`, d.RESTAddr(), d.GatewayAddr(), d.Token(), d.APIURL(), d.GatewayURL(), dcAccess)), 0o600)
	h.admin = serve(t, bin, plugins, h.data, "--config", cfg).Admin
	h.waitFor("the bot to connect", d.Delivered)
	return h
}

func (h *discordHost) waitFor(what string, cond func() bool) {
	h.t.Helper()
	start := time.Now()
	if err := h.d.Wait(testdeadline.Scale(60*time.Second), cond); err != nil {
		var b strings.Builder
		for _, m := range h.d.AllPosted() {
			fmt.Fprintf(&b, "  %s: %q\n", m.ChannelID, m.Content)
		}
		h.t.Fatalf("%s: %v\nposted:\n%s", what, err, b.String())
	}
	h.t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

// plugin is discord's entry on /api/plugins: the main profile's status, and the egress calls
// the policy refused.
func (h *discordHost) plugin() (state, message string, denied int64) {
	h.t.Helper()
	var api struct {
		Plugins []struct {
			Name         string
			Status       map[string]struct{ State, Message string }
			EgressDenied int64 `json:"egress_denied"`
		}
	}
	if code := adminRequest(h.t, "GET", h.admin, h.data, "/api/plugins", "", &api); code != 200 {
		h.t.Fatalf("/api/plugins: %d", code)
	}
	for _, p := range api.Plugins {
		if p.Name == "discord" {
			return p.Status["main"].State, p.Status["main"].Message, p.EgressDenied
		}
	}
	h.t.Fatal("no discord plugin on /api/plugins")
	return "", "", 0
}

// count is how many of the bot's messages in channel contain sub.
func (h *discordHost) count(channel, sub string) int {
	n := 0
	for _, s := range h.d.PostedTexts(channel) {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func (h *discordHost) has(channel, sub string) func() bool {
	return func() bool { return h.count(channel, sub) > 0 }
}

// TestDiscordEndToEnd runs the real binary with the real discord.wasm against the Discord fake:
// a mention in a thread is answered in that thread, as a reply; a process started in thread A
// notifies thread A while the user talks in thread B; process output with @everyone, @here and
// a role mention pings nobody (allowed_mentions, checked at the fake); after /new in thread A an
// old completion is dropped and recorded.
func TestDiscordEndToEnd(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	h := startDiscordHost(t)
	d := h.d
	d.AddThread(dcGeneral, dcThreadA, "thread A")
	d.AddThread(dcGeneral, dcThreadB, "thread B")

	chatter := d.Say(dcGeneral, dt.Bob, "just chatting about lunch")
	a := d.Mention(dcThreadA, dt.Ann, "help")
	h.waitFor("the reply in thread A", h.has(dcThreadA, "built-in agent"))
	if posts := d.Posted(dcThreadA); posts[0].ReplyTo != a.ID {
		t.Fatalf("the answer does not reply to the mention %s: %+v", a.ID, posts[0])
	}
	if top := d.Posted(dcGeneral); len(top) != 0 {
		t.Fatalf("answered in the channel (the chatter %s must not be, the mention was in the thread): %+v", chatter.ID, top)
	}

	// The bot was mentioned in thread A: it follows it, no mention needed there.
	d.Say(dcThreadA, dt.Ann, "run sleep 1; echo discord-done-A")
	h.waitFor("the start confirmation in A", h.has(dcThreadA, "Started"))
	d.Mention(dcThreadB, dt.Ann, "hello from thread B")
	h.waitFor("a reply in thread B", h.has(dcThreadB, "hello from thread B"))
	h.waitFor("the completion in thread A", h.has(dcThreadA, "output:\ndiscord-done-A\n"))
	if h.has(dcThreadB, "discord-done-A")() {
		t.Fatal("the completion leaked into thread B")
	}

	// Process output that would ping the whole server, a role and a user.
	d.Say(dcThreadA, dt.Ann, "sh echo '@everyone @here <@&6000000000000000001> <@"+dt.Bob.ID+"> ping-test'")
	h.waitFor("the output in thread A", h.has(dcThreadA, "ping-test"))
	for _, m := range d.AllPosted() {
		if strings.Contains(m.Content, "ping-test") && (!strings.Contains(m.Content, "@everyone") || m.Pinged.Any()) {
			t.Fatalf("the output pinged %+v (allowed_mentions %s), or lost its text: %q", m.Pinged, m.AllowedMentions, m.Content)
		}
	}
	for _, m := range d.AllPosted() {
		if m.Pinged.Any() || len(m.AllowedMentions) == 0 {
			t.Fatalf("a message pinged %+v (allowed_mentions %s): %q", m.Pinged, m.AllowedMentions, m.Content)
		}
	}

	d.Say(dcThreadA, dt.Ann, "run sleep 2; echo discord-stale-output")
	h.waitFor("the second start", h.has(dcThreadA, "discord-stale-output"))
	d.Say(dcThreadA, dt.Ann, "!new") // the Discord client keeps / for its own commands
	h.waitFor("the /new confirmation", h.has(dcThreadA, "New conversation"))

	var dropped string
	h.waitFor("the stale completion to be recorded as dropped", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls", "--dropped", "--key", "agent:main:discord:group:"+dcGeneral+":"+dcThreadA)
		dropped = out
		return err == nil && strings.Contains(out, "stale: user_boundary")
	})
	t.Logf("deliveries ls --dropped:\n%s", dropped)
	for _, s := range d.PostedTexts(dcThreadA) {
		if strings.Contains(s, "discord-stale-output") && !strings.HasPrefix(s, "Started") {
			t.Fatalf("stale output posted: %q", s)
		}
	}
	// The bot's own posts came back over the Gateway and started nothing.
	for _, m := range d.AllPosted() {
		if strings.Contains(m.Content, "I understood") && strings.Contains(m.Content, "built-in agent:") {
			t.Fatalf("the bot answered itself: %q", m.Content)
		}
	}
	if v := d.Violations(); len(v) > 0 || len(d.Identifies()) != 1 {
		t.Fatalf("violations %q, %d identifies", v, len(d.Identifies()))
	}
}

// TestDiscordGatewayDropResumes: the Gateway connection is cut mid-conversation (while a
// process runs, and once right after an event was written to it): the plugin RESUMEs the
// session, every message is answered exactly once, and the process's completion arrives once.
func TestDiscordGatewayDropResumes(t *testing.T) {
	t.Parallel()
	h := startDiscordHost(t)
	d := h.d
	dm := d.DMChannel(dt.Ann)

	d.DM(dt.Ann, "run sleep 2; echo discord-after-drop")
	h.waitFor("the start confirmation", h.has(dm, "Started"))
	d.DropConnections()
	d.DM(dt.Ann, "said while the Gateway was down")
	h.waitFor("the answer to the message said while down", h.has(dm, "said while the Gateway was down"))
	h.waitFor("the completion", h.has(dm, "output:\ndiscord-after-drop\n"))

	h.waitFor("connected", d.Delivered)
	d.DropAfterNext()
	d.DM(dt.Ann, "cut off right after this one")
	h.waitFor("the answer to the message cut off with its connection", h.has(dm, "cut off right after this one"))
	h.waitFor("connected again", d.Delivered)
	d.DM(dt.Ann, "the last word")
	h.waitFor("the last answer", h.has(dm, "the last word"))

	for _, sub := range []string{"said while the Gateway was down", "cut off right after this one", "the last word", "output:\ndiscord-after-drop\n"} {
		if n := h.count(dm, sub); n != 1 {
			t.Errorf("%q answered %d times, want once: %q", sub, n, d.PostedTexts(dm))
		}
	}
	accepted := 0
	for _, r := range d.Resumes() {
		if r.Accepted {
			accepted++
		}
	}
	if ids := len(d.Identifies()); ids != 1 || accepted < 2 {
		t.Fatalf("%d identifies and %d accepted resumes: every drop must be resumed (%+v)", ids, accepted, d.Resumes())
	}
	// The operator sees the profile connected, and the scopes refused nothing the plugin needs.
	var state, message string
	var denied int64
	h.waitFor("the profile shown connected", func() bool {
		state, message, denied = h.plugin()
		return state == "ok" && strings.Contains(message, "resumes")
	})
	if denied != 0 {
		t.Fatalf("%d egress calls denied (status %s: %s)", denied, state, message)
	}
	t.Logf("status %s: %s", state, message)
}
