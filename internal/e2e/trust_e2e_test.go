package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

var pairingCode = regexp.MustCompile(`pairing code to the operator of this bot: ([A-Z0-9]{8})`)

// TestTelegramTrustBoundary runs the real binary with telegram.wasm against the Bot API fake:
//   - an unknown user's "sh id" starts no process and gets exactly one pairing message (a second
//     message gets nothing);
//   - after `hermes-host pairing approve CODE` the same user's command runs;
//   - a group member who is not allowed gets nothing;
//   - a user allowed in chat A cannot act in chat B (where another user can).
func TestTelegramTrustBoundary(t *testing.T) {
	const groupA, groupB = -1001, -1002
	stranger := telegramtest.User{ID: 501, FirstName: "Stranger", Username: "stranger"}
	ann := telegramtest.User{ID: 111, FirstName: "Ann", Username: "ann"}
	bob := telegramtest.User{ID: 222, FirstName: "Bob", Username: "bob"}
	eve := telegramtest.User{ID: 333, FirstName: "Eve", Username: "eve"}
	th := startTelegramWith(t, func(tg *telegramtest.Server) {
		tg.AddPrivate(stranger)
		tg.AddSupergroup(groupA, "A")
		tg.AddSupergroup(groupB, "B")
	}, `{tools: [shell, processes], groups: {"-1001": {users: ["111"]}, "-1002": {users: ["222"]}}}`)
	tg, bot, bin, data, admin := th.tg, th.bot, th.bin, th.data, th.admin

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := tg.Wait(60*time.Second, cond); err != nil {
			t.Fatalf("%s: %v\nsent: %+v", what, err, tg.AllSent())
		}
	}
	sentTo := func(chat int64, sub string) int {
		n := 0
		for _, s := range tg.SentTexts(chat, 0) {
			if strings.Contains(s, sub) {
				n++
			}
		}
		return n
	}
	cli := func(args ...string) string {
		t.Helper()
		out, err := runCLI(bin, data, append(args, "--admin-listen", admin)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return out
	}
	// refusals waits until the auth log holds n rows containing sub: the host has decided.
	refusals := func(sub string, n int) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d auth log rows with %q", n, sub), func() bool {
			return strings.Count(cli("auth", "log"), sub) >= n
		})
	}
	processes := func() int {
		var out struct{ Processes []struct{ Command string } }
		adminRequest(t, "GET", admin, data, "/api/processes", "", &out)
		return len(out.Processes)
	}

	// 1. An unknown user: no process, one pairing message, even after a second message.
	bot.PrivateText(stranger, "sh id")
	waitFor("the pairing message", func() bool { return sentTo(stranger.ID, "pairing code") == 1 })
	bot.PrivateText(stranger, "sh id")
	refusals("pairing_pending", 1)
	if n := len(tg.SentTexts(stranger.ID, 0)); n != 1 || processes() != 0 {
		t.Fatalf("stranger: %d messages (want 1), %d processes (want 0): %q", n, processes(), tg.SentTexts(stranger.ID, 0))
	}
	m := pairingCode.FindStringSubmatch(tg.SentTexts(stranger.ID, 0)[0])
	if m == nil {
		t.Fatalf("no code in %q", tg.SentTexts(stranger.ID, 0)[0])
	}
	if ls := cli("pairing", "ls"); !strings.Contains(ls, m[1]) || !strings.Contains(ls, "501") {
		t.Fatalf("pairing ls:\n%s", ls)
	}

	// 2. The operator approves the code (through the serving host), and is told that this gives
	// the user a shell: the user is told, and the same command now runs.
	if out := cli("pairing", "approve", m[1]); !strings.Contains(out, "approved 501") || strings.Contains(out, "not told") ||
		!strings.Contains(out, "tools: shell (the agent runs commands on this machine") {
		t.Fatalf("approve: %s", out)
	}
	waitFor("the approval notice", func() bool { return sentTo(stranger.ID, "approved you") == 1 })
	bot.PrivateText(stranger, "sh id")
	waitFor("the command's output", func() bool { return sentTo(stranger.ID, "uid=") == 1 })
	if processes() != 1 {
		t.Fatalf("%d processes after the approved command", processes())
	}

	// 3. A group member who is not allowed gets nothing, mentioned or not.
	bot.MentionText(groupA, eve, "sh echo eve-was-here")
	bot.GroupText(groupA, eve, "sh echo eve-again")
	refusals("unknown_user", 2)
	// 4. Ann is allowed in A, not in B; Bob is allowed in B.
	bot.MentionText(groupB, ann, "sh echo ann-in-B")
	refusals("unknown_user", 3)
	bot.MentionText(groupA, ann, "sh echo ann-in-$((1+1))-A")
	bot.MentionText(groupB, bob, "sh echo bob-in-$((1+1))-B")
	waitFor("Ann's answer in A", func() bool { return sentTo(groupA, "ann-in-2-A") == 1 })
	waitFor("Bob's answer in B", func() bool { return sentTo(groupB, "bob-in-2-B") == 1 })
	if sentTo(groupA, "eve") != 0 || sentTo(groupB, "ann-in-B") != 0 || len(tg.SentTexts(groupA, 0)) != 1 || len(tg.SentTexts(groupB, 0)) != 1 {
		t.Fatalf("refused senders were answered:\nA: %q\nB: %q", tg.SentTexts(groupA, 0), tg.SentTexts(groupB, 0))
	}
	if processes() != 3 {
		t.Fatalf("%d processes; want 3 (the approved DM, Ann in A, Bob in B)", processes())
	}
	// Every refusal is counted.
	var metrics string
	adminRequest(t, "GET", admin, data, "/metrics", "", &metrics)
	for _, want := range []string{`reason="pairing_code_sent"} 1`, `reason="pairing_pending"} 1`, `reason="unknown_user"} 3`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Revoked, the user is a stranger again.
	if out := cli("pairing", "revoke", "501"); !strings.Contains(out, "revoked 501 on telegram/main") {
		t.Fatalf("revoke: %s", out)
	}
	bot.PrivateText(stranger, "sh id")
	waitFor("a new pairing message", func() bool { return sentTo(stranger.ID, "pairing code") == 2 })
	if sentTo(stranger.ID, "uid=") != 1 || processes() != 3 {
		t.Fatal("a revoked user's command ran")
	}
}

// TestOutOfTheBox runs the binary on the embedded defaults only, as `make serve` does, and walks
// the README: the operator talks to the demo platform on the admin listener with the token from
// the data directory; a background job notifies, a /new drops a later one. A web page's
// cross-site text/plain POST to the demo (on either listener) is refused and runs nothing; the
// admin API refuses a request without the token and one with a foreign Host.
func TestOutOfTheBox(t *testing.T) {
	bin, plugins := buildHost(t)
	data := t.TempDir()
	// The embedded defaults alone, with the admin listener on a free port: the demo's replies
	// follow the listener. A trap on the default admin port, 8485, catches anything (a reply,
	// the demo secret) still addressed there; when something else holds that port, the trap is
	// left out and the replies alone are checked.
	if trap, err := net.Listen("tcp", "127.0.0.1:8485"); err == nil {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("a request reached 127.0.0.1:8485, which is not this host's admin listener: %s %s", r.Method, r.URL.Path)
		})}
		go srv.Serve(trap)
		defer srv.Close()
	} else {
		t.Logf("127.0.0.1:8485 is taken (%v): the trap for requests sent there is left out", err)
	}
	admin := freeAddr(t)
	public, stop := startServe(t, bin, plugins, data, "--admin-listen", admin)
	defer stop()

	n := 0
	say := func(text string) {
		t.Helper()
		n++
		body := fmt.Sprintf(`{"id":"r%d","chat_id":"42","user_id":"me","text":%q}`, n, text)
		if code := adminRequest(t, "POST", admin, data, "/demo/inbox", body, nil); code != 200 {
			t.Fatalf("say %q: %d", text, code)
		}
	}
	outbox := func() []string {
		var out struct{ Messages []struct{ Text string } }
		adminRequest(t, "GET", admin, data, "/demo/outbox", "", &out)
		var texts []string
		for _, m := range out.Messages {
			texts = append(texts, m.Text)
		}
		return texts
	}
	has := func(subs ...string) func() bool {
		return func() bool {
			for _, s := range outbox() {
				n := 0
				for _, sub := range subs {
					if strings.Contains(s, sub) {
						n++
					}
				}
				if n == len(subs) {
					return true
				}
			}
			return false
		}
	}
	say("help")
	eventually(t, "help", has("built-in agent"))
	say("run sleep 1; echo built")
	eventually(t, "the job's notification", has("built", "Last lines"))
	say("run sleep 1; echo dropped-job")
	eventually(t, "the second start", has("dropped-job"))
	say("/new")
	eventually(t, "the drop to be recorded", func() bool {
		out, err := runCLI(bin, data, "deliveries", "ls", "--dropped")
		return err == nil && strings.Contains(out, "user_boundary")
	})

	// The operator's actions from the CLI, through the serving host: kill a running process (its
	// conversation is told), refuse to retry the dropped notice (it was dropped on purpose), and
	// reload a plugin.
	say("run sleep 300; echo never")
	eventually(t, "the long job's start", has("Started proc_", "sleep 300"))
	var started string
	for _, s := range outbox() {
		if m := regexp.MustCompile(`Started (proc_[0-9a-f]+) in the background: sleep 300`).FindStringSubmatch(s); m != nil {
			started = m[1]
		}
	}
	if out, err := runCLI(bin, data, "--admin-listen", admin, "ps", "kill", started); err != nil || !strings.Contains(out, "killed "+started) {
		t.Fatalf("ps kill %s: %v\n%s", started, err, out)
	}
	eventually(t, "the kill's notice", has("Your background job was stopped"))
	out, err := runCLI(bin, data, "deliveries", "ls", "--dropped", "--json")
	var dropped []struct{ ID string }
	if err != nil || json.Unmarshal([]byte(out), &dropped) != nil || len(dropped) != 1 {
		t.Fatalf("deliveries ls --dropped --json: %v\n%s", err, out)
	}
	if out, err := runCLI(bin, data, "--admin-listen", admin, "deliveries", "retry", dropped[0].ID); err == nil || !strings.Contains(out, "dropped") {
		t.Fatalf("retrying a dropped notice: %v\n%s", err, out)
	}
	if out, err := runCLI(bin, data, "--admin-listen", admin, "plugins", "reload", "echo"); err != nil || !strings.Contains(out, "reloaded echo") {
		t.Fatalf("plugins reload echo: %v\n%s", err, out)
	}

	// A web page's request: a CORS simple request (text/plain, no preflight) with its Origin.
	marker := filepath.Join(t.TempDir(), "pwned")
	evil := fmt.Sprintf(`{"id":"evil1","chat_id":"42","user_id":"me","text":"sh touch %s"}`, marker)
	for _, url := range []string{"http://" + admin + "/demo/inbox", "http://" + public + "/hooks/echo/main"} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(evil))
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Origin", "https://evil.example")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("cross-site POST to %s answered %d", url, resp.StatusCode)
		}
	}
	// Without the Origin (curl from another local user, say) the token or the secret is still missing.
	resp, err := http.Post("http://"+admin+"/demo/inbox", "text/plain", strings.NewReader(evil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("demo inbox without the token answered %d", resp.StatusCode)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a cross-site request ran a command")
	}
	for _, s := range outbox() {
		if strings.Contains(s, "pwned") {
			t.Fatalf("a cross-site request reached the agent: %q", s)
		}
	}

	// The admin API: the token is required, and a foreign Host is refused even with it.
	if code := getJSON(t, "http://"+admin+"/api/sessions", nil); code != 401 {
		t.Errorf("admin API without the token: %d", code)
	}
	token, _ := os.ReadFile(filepath.Join(data, "admin.token"))
	req, _ := http.NewRequest("GET", "http://"+admin+"/api/sessions", nil)
	req.Host = "rebound.evil.example"
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("admin API with a foreign Host: %d", resp.StatusCode)
	}
	// The secrets are the owner's only.
	for _, f := range []string{"", "admin.token", "demo.secret", "hermes.db"} {
		fi, err := os.Stat(filepath.Join(data, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v", filepath.Join(data, f), fi.Mode().Perm())
		}
	}
}

// TestImpostorPlatformRejected: a plugin whose manifest claims the echo platform, dropped into
// the plugins directory of a host serving echo, is rejected with a reason naming echo, in
// /api/plugins and in `plugins ls`; echo keeps serving. (Which of two claimants present at the
// same start wins depends on which finishes loading first: see RATIONALE.md.)
func TestImpostorPlatformRejected(t *testing.T) {
	bin, plugins := buildHost(t)
	impostor, err := wasmbuild.BuildWith("../plugin/testdata/probe", "-X main.name=impostor -X main.platform=echo")
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	cfg := filepath.Join(data, "hermes.yaml")
	os.WriteFile(cfg, []byte("plugins: {impostor: {profiles: {main: {token: t}}}}\n"), 0o600)
	sh := serve(t, bin, plugins, data, "--config", cfg)
	defer sh.Stop()
	admin := sh.Admin
	if err := wasmbuild.CopyFile(impostor, filepath.Join(plugins, "impostor.wasm")); err != nil {
		t.Fatal(err)
	}
	var api struct {
		Plugins  []struct{ Name string }
		Rejected []struct{ Path, Error string }
	}
	eventually(t, "the impostor's rejection", func() bool {
		api.Rejected = nil
		adminRequest(t, "GET", admin, data, "/api/plugins", "", &api)
		return len(api.Rejected) > 0
	})
	if len(api.Rejected) != 1 || !strings.HasSuffix(api.Rejected[0].Path, "impostor.wasm") ||
		!strings.Contains(api.Rejected[0].Error, "owned by plugin echo") {
		t.Fatalf("/api/plugins rejected: %+v", api.Rejected)
	}
	for _, p := range api.Plugins {
		if p.Name == "impostor" {
			t.Fatal("the impostor is loaded")
		}
	}
	out, err := runCLI(bin, data, "--plugins", plugins, "--config", cfg, "--admin-listen", admin, "plugins", "ls")
	if err != nil || !strings.Contains(out, `impostor.wasm: platform "echo" is already owned by plugin echo`) {
		t.Fatalf("plugins ls: %v\n%s", err, out)
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
