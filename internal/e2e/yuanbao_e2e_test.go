package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ybt "github.com/hermes-host/hermes-host/conformance/yuanbaotest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

var (
	ybAnn  = ybt.User{ID: "u_ann", Nick: "Ann"}
	ybBob  = ybt.User{ID: "u_bob", Nick: "Bob"}
	ybTeam = ybt.Group{Code: "g_team", Name: "Team"}
)

// ybHost is the real binary serving yuanbao.wasm against a Yuanbao fake.
type ybHost struct {
	t          *testing.T
	yb         *ybt.Server
	bot        *ybt.Bot
	bin, data  string
	plugins    string
	addr       string
	admin      string // the admin listener
	configPath string
}

// ybAccess admits everyone on the main profile, with tools, and leaves the groups' mention rule
// at its default (a mention needed): the host's gate and the plugin's gating must agree.
const ybAccess = `{allow_all: true, tools: [shell, processes], groups: {"*": {allow_all: true}}}`

// startYuanbaoHost runs the binary with yuanbao.wasm pointed at a fresh fake, under
// strict_egress (the plugin's egress is scoped). extra is YAML added to the plugin's settings
// (limits…) and profile is added to the profile's.
func startYuanbaoHost(t *testing.T, extra, profile string) *ybHost {
	t.Helper()
	yb := ybt.New(t)
	bot := yb.Bot()
	bin, plugins := buildHost(t)
	h := &ybHost{t: t, yb: yb, bot: bot, bin: bin, plugins: plugins, data: t.TempDir()}
	h.configPath = filepath.Join(h.data, "hermes.yaml")
	os.WriteFile(h.configPath, []byte(fmt.Sprintf(`
strict_egress: true
plugins:
  yuanbao:
    egress_extra: ["127.0.0.1"]
%s
    profiles:
      main: {app_id: "%s", app_secret: "%s", api_domain: "%s", ws_url: "%s"%s}
    access:
      main: %s
`, extra, bot.AppID(), bot.Secret(), yb.URL(), yb.WSURL(), profile, ybAccess)), 0o600)
	sh := serve(t, bin, plugins, h.data, "--config", h.configPath)
	h.addr, h.admin = sh.Addr, sh.Admin
	h.waitFor("the bot to connect", func() bool { return bot.Connected() })
	return h
}

func (h *ybHost) waitFor(what string, cond func() bool) {
	h.t.Helper()
	if err := h.yb.Wait(60*time.Second, cond); err != nil {
		h.t.Fatalf("%s: %v\nDM Ann: %q\nDM Bob: %q\ngroup: %q", what, err, h.bot.SentTexts("dm", ybAnn.ID),
			h.bot.SentTexts("dm", ybBob.ID), h.bot.SentTexts("group", ybTeam.Code))
	}
}

// has reports whether a message containing sub was posted into a chat.
func (h *ybHost) has(chatType, chatID, sub string) func() bool {
	return func() bool { return h.count(chatType, chatID, sub) > 0 }
}

// api reads an admin API path into v.
func (h *ybHost) api(path string, v any) {
	h.t.Helper()
	if code := adminRequest(h.t, "GET", h.admin, h.data, path, "", v); code != 200 {
		h.t.Fatalf("GET %s: status %d", path, code)
	}
}

// console logs in to the operator console with the admin token, as a browser does (the login
// form's cookie, then the token), and returns the page at /console/<page>.
func (h *ybHost) console(page string) string {
	h.t.Helper()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	base := "http://" + h.admin + "/console/"
	resp, err := cl.Get(base + "login")
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	u, _ := url.Parse(base)
	form := ""
	for _, c := range jar.Cookies(u) {
		if c.Name == "hermes_console_login" {
			form = c.Value
		}
	}
	token, _ := os.ReadFile(filepath.Join(h.data, "admin.token"))
	resp, err = cl.PostForm(base+"login", url.Values{"form": {form}, "token": {strings.TrimSpace(string(token))},
		"next": {"/console/" + page}})
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/console/"+page {
		h.t.Fatalf("console %s: status %d at %s:\n%s", page, resp.StatusCode, resp.Request.URL, b)
	}
	return string(b)
}

func (h *ybHost) count(chatType, chatID, sub string) int {
	n := 0
	for _, s := range h.bot.SentTexts(chatType, chatID) {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// transcript is the tail of a session key's current transcript, one "role: text" per line.
func (h *ybHost) transcript(key string) string {
	var v struct {
		Tail []struct{ Role, Text string }
	}
	h.api("/api/sessions?show="+key, &v)
	var b strings.Builder
	for _, m := range v.Tail {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Text)
	}
	return b.String()
}

// TestYuanbaoEndToEnd runs the real binary with yuanbao.wasm against the Yuanbao fake: group
// chatter is observed, not answered; a mention is answered in the group; a process started in
// a DM notifies that DM although the user ran /new in the group; after /new in the DM, a
// process's completion is dropped and recorded.
func TestYuanbaoEndToEnd(t *testing.T) {
	h := startYuanbaoHost(t, "", "")
	bot := h.bot

	chatter := bot.GroupText(ybTeam, ybAnn, "just chatting about lunch")
	mention := bot.GroupMention(ybTeam, ybAnn, "help")
	h.waitFor("the mention's answer in the group", h.has("group", ybTeam.Code, "built-in agent"))
	groupKey := "agent:main:yuanbao:group:" + ybTeam.Code + ":" + ybAnn.ID
	tr := h.transcript(groupKey)
	if !strings.Contains(tr, "user: [Ann] just chatting about lunch\n") || !strings.Contains(tr, "user: help\n") {
		t.Fatalf("group transcript:\n%s", tr)
	}
	sent := bot.Sent("group", ybTeam.Code)
	if len(sent) != 1 || sent[0].RefMsgID != mention.MsgID {
		t.Fatalf("group answers %+v (the chatter %s must not be answered; the answer quotes the mention)", sent, chatter.MsgID)
	}

	bot.DM(ybAnn, "run sleep 2; echo yb-dm-done")
	h.waitFor("the DM start confirmation", h.has("dm", ybAnn.ID, "Started"))
	bot.GroupMention(ybTeam, ybAnn, "/new")
	h.waitFor("the /new confirmation in the group", h.has("group", ybTeam.Code, "New conversation"))
	h.waitFor("the completion in the DM", h.has("dm", ybAnn.ID, "yb-dm-done\n"))
	if h.has("group", ybTeam.Code, "yb-dm-done")() {
		t.Fatal("the DM's completion reached the group")
	}

	bot.DM(ybAnn, "run sleep 2; echo yb-stale-output")
	h.waitFor("the second start", h.has("dm", ybAnn.ID, "yb-stale-output"))
	bot.DM(ybAnn, "/new")
	h.waitFor("the /new confirmation in the DM", func() bool { return h.count("dm", ybAnn.ID, "New conversation") == 1 })
	eventually(t, "the stale completion to be recorded as dropped", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls", "--dropped")
		return err == nil && strings.Contains(out, "stale: user_boundary")
	})
	for _, s := range bot.SentTexts("dm", ybAnn.ID) {
		if strings.Contains(s, "yb-stale-output") && !strings.HasPrefix(s, "Started") {
			t.Fatalf("stale output sent: %q", s)
		}
	}
	if bot.Binds() != 1 || len(h.yb.Violations()) != 0 {
		t.Fatalf("binds %d, violations %q", bot.Binds(), h.yb.Violations())
	}
}

// TestYuanbaoReconnectRecallAndStop: a push the socket dropped (once in the middle of writing
// it, once right after) is answered exactly once after the reconnect; a recall arriving while
// its turn runs cancels the turn; a permanent close code stops reconnecting and shows on
// /api/plugins.
func TestYuanbaoReconnectRecallAndStop(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	h := startYuanbaoHost(t, "", "")
	bot := h.bot

	bot.DM(ybBob, "ps", ybt.DropWhilePushing(ybt.DropAfterPush))
	h.waitFor("the answer after the reconnect", h.has("dm", ybBob.ID, "No processes"))
	long := "ps\n" + strings.Repeat("padding so that the push is cut on the wire ", 300)
	bot.DM(ybAnn, long, ybt.DropWhilePushing(ybt.DropDuringPush))
	h.waitFor("the answer to the push cut in half", h.has("dm", ybAnn.ID, "No processes"))
	time.Sleep(2 * time.Second) // a second turn would have answered by now
	if n, m := h.count("dm", ybBob.ID, "No processes"), h.count("dm", ybAnn.ID, "No processes"); n != 1 || m != 1 || bot.Binds() != 3 {
		t.Fatalf("answers %d and %d, binds %d: want one turn per push, two reconnects", n, m, bot.Binds())
	}

	slow := bot.DM(ybAnn, "sh sleep 5; echo yb-recalled-answer")
	h.waitFor("the turn to start (typing)", func() bool { return len(h.bot.Heartbeats("dm", ybAnn.ID)) > 0 })
	time.Sleep(500 * time.Millisecond)
	bot.RecallDM(ybAnn, slow.MsgID)
	bot.DM(ybAnn, "help")
	h.waitFor("the next message's answer", h.has("dm", ybAnn.ID, "built-in agent"))
	time.Sleep(6 * time.Second) // past the recalled command's end
	if h.has("dm", ybAnn.ID, "yb-recalled-answer")() || h.has("dm", ybAnn.ID, "Exit code")() {
		t.Fatalf("the recalled message was answered: %q", bot.SentTexts("dm", ybAnn.ID))
	}
	if tr := h.transcript("agent:main:yuanbao:dm:" + ybAnn.ID); strings.Contains(tr, "yb-recalled-answer") {
		t.Fatalf("the recalled message is still in the transcript:\n%s", tr)
	}

	bot.Close(4013, "bot disabled")
	type status struct{ State, Message string }
	var got status
	eventually(t, "the stop to show on /api/plugins", func() bool {
		var api struct {
			Plugins []struct {
				Name   string
				Status map[string]status
			}
		}
		h.api("/api/plugins", &api)
		for _, p := range api.Plugins {
			if p.Name == "yuanbao" {
				got = p.Status["main"]
			}
		}
		return got.State == "stopped"
	})
	if !strings.Contains(got.Message, "4013") || !strings.Contains(got.Message, "bot disabled") {
		t.Fatalf("status %+v", got)
	}
	if page := h.console("plugins"); !strings.Contains(page, `<span class="badge bad">stopped</span>`) || !strings.Contains(page, "4013") {
		t.Fatalf("the console's plugins page does not show the stop:\n%s", page)
	}
	binds, conns := bot.Binds(), bot.Connections()
	time.Sleep(5 * time.Second) // the back-off would have reconnected within 1 s
	if bot.Binds() != binds || bot.Connections() != conns || bot.Connected() {
		t.Fatalf("reconnected after 4013: binds %d→%d", binds, bot.Binds())
	}
}

// TestYuanbaoConnectionOwnedByTheHost: the WebSocket belongs to the host, so neither hot reloads
// of the plugin nor an instance that dies mid-send open a new connection or bind again.
func TestYuanbaoConnectionOwnedByTheHost(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	// A send waits up to 5 s for its answer but the call deadline is 2 s: a send whose answer is
	// late kills its instance (a crash, outcome unknown).
	h := startYuanbaoHost(t, "    limits: {call_timeout: 2s}", `, send_timeout_ms: 5000`)
	bot := h.bot
	bot.DM(ybAnn, "ps")
	h.waitFor("a first answer", h.has("dm", ybAnn.ID, "No processes"))

	for i, version := range []string{"1.0.1", "1.0.2"} {
		path, err := wasmbuild.BuildWith("../../plugins/yuanbao", "-X main.Version="+version)
		if err != nil {
			t.Fatal(err)
		}
		if err := wasmbuild.CopyFile(path, filepath.Join(h.plugins, "yuanbao.wasm")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "version "+version+" to load", func() bool {
			var api struct {
				Plugins []struct {
					Manifest struct{ Name, Version string }
				}
			}
			h.api("/api/plugins", &api)
			for _, p := range api.Plugins {
				if p.Manifest.Name == "yuanbao" && p.Manifest.Version == version {
					return true
				}
			}
			return false
		})
		bot.DM(ybAnn, "ps")
		h.waitFor("an answer after reload "+version, func() bool { return h.count("dm", ybAnn.ID, "No processes") == i+2 })
	}

	bot.FailSends(ybt.SendFault{Delay: 4 * time.Second})
	bot.DM(ybBob, "ps")
	eventually(t, "the send that crashed its instance to be reconciled", func() bool {
		for _, r := range (&host{t: t, addr: h.addr, admin: h.admin, data: h.data}).deliveries("failed") {
			if strings.Contains(r.Reason, "outcome unknown") {
				return true
			}
		}
		return false
	})
	bot.DM(ybBob, "ps")
	h.waitFor("an answer after the crash", func() bool { return h.count("dm", ybBob.ID, "No processes") == 2 })
	if bot.Binds() != 1 || bot.Connections() != 1 {
		t.Fatalf("binds %d, connections %d: the connection must survive reloads and crashes", bot.Binds(), bot.Connections())
	}
	if n := h.count("dm", ybBob.ID, "No processes"); n != 2 {
		t.Fatalf("%d answers to Bob: the crashed send must not be resent", n)
	}
}

// `hermes-host conformance yuanbao.wasm --platform yuanbao` runs the Yuanbao profile against
// its fake and passes.
func TestYuanbaoConformanceCommand(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	bin, plugins := buildHost(t)
	out, err := exec.Command(bin, "conformance", filepath.Join(plugins, "yuanbao.wasm"), "--platform", "yuanbao").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reload: same connection") || strings.Contains(string(out), "FAIL") {
		t.Fatalf("yuanbao.wasm --platform yuanbao: %v\n%s", err, out)
	}
}
