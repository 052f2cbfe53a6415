package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// consoleHost runs the real binary with echo.wasm as the demo platform (its outbox on this
// host's admin listener, as in the embedded defaults) and a second echo profile, "side", whose
// access is the default (nobody; DM pairing) and whose outbox is stranger, a loopback fake. It
// returns the public and admin listeners' addresses, the admin token, and the plugins directory.
func consoleHost(t *testing.T, stranger *echotest.Server) (public, admin, token, plugins string) {
	t.Helper()
	bin := hostBinary(t)
	plugins = filepath.Join(t.TempDir(), "plugins")
	os.MkdirAll(plugins, 0o755)
	wasmbuild.CopyTo(t, "../../plugins/echo", filepath.Join(plugins, "echo.wasm"))
	data := t.TempDir()
	admin = freeAddr(t)
	cfg := filepath.Join(data, "hermes.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`plugins:
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "http://%s/demo/outbox"}
      side: {outbox_url: "%s/outbox"}
    access:
      main: {allow_all: true, tools: [shell, processes]}
`, admin, stranger.URL())), 0o600)
	public, stop := startServe(t, bin, plugins, data, "--config", cfg, "--admin-listen", admin)
	t.Cleanup(stop)
	b, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return public, admin, strings.TrimSpace(string(b)), plugins
}

// strangerSays posts a DM from user "stranger" to the side profile's public webhook.
func strangerSays(t *testing.T, public, id, text string) {
	t.Helper()
	body := fmt.Sprintf(`{"id":%q,"chat_id":"7","user_id":"stranger","text":%q}`, id, text)
	resp, err := http.Post("http://"+public+"/hooks/echo/side", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the side webhook answered %d", resp.StatusCode)
	}
}

// chatHas is a page condition: a message from the host holds every one of subs.
func chatHas(subs ...string) string {
	var conds []string
	for _, s := range subs {
		conds = append(conds, fmt.Sprintf("li.textContent.includes(%q)", s))
	}
	return `[...document.querySelectorAll("#chat-log li.host")].some(li => ` + strings.Join(conds, " && ") + `)`
}

// TestConsoleInBrowser drives the console in chromium against the real binary and echo.wasm:
//   - the login page takes the admin token;
//   - `run sleep 1; echo done` typed in the chat: the start and then the completion appear
//     without the page reloading;
//   - a second job, then the /new button: the chat shows the conversation changed, and the
//     deliveries page (filter: dropped) shows the job's completion dropped with its reason;
//   - a running process's page follows its output live, then says where its notice went;
//   - /compress and /branch: the chat marks each move; the session page shows the lineage;
//   - a stranger's DM on another profile gets a pairing code, which the plugins page approves:
//     the stranger is told and their next message is answered;
//   - every page: readable (screenshots), labelled, usable at a phone's width;
//   - echo.wasm replaced by a broken file: the plugins page shows it rejected while the old
//     version keeps answering the chat;
//   - nothing is requested from anywhere but the host, and no page logs an error (a
//     Content-Security-Policy violation would be one).
func TestConsoleInBrowser(t *testing.T) {
	b := newBrowser(t) // first: without chromium the test skips (or fails) before starting a host
	start := time.Now()
	stranger := echotest.New()
	defer stranger.Close()
	public, admin, token, plugins := consoleHost(t, stranger)
	base := "http://" + admin
	t.Logf("host up in %v", time.Since(start).Round(time.Millisecond))
	console := base + "/console/"
	say := func(text string) {
		t.Helper()
		b.do("typing "+text, chromedp.SendKeys(chromedp.ID("say-text"), text), chromedp.Click(chromedp.CSS("#chat-form button")))
	}
	press := func(label string) {
		t.Helper()
		if !eval[bool](b, fmt.Sprintf(`(() => { const el = [...document.querySelectorAll(".commands button")].find(b => b.textContent === %q); if (el) el.click(); return !!el })()`, label)) {
			t.Fatalf("no %s button", label)
		}
	}
	visit := func(path, ready string) {
		t.Helper()
		b.do("opening "+path, chromedp.Navigate(console+path), chromedp.WaitVisible(chromedp.CSS(ready)))
	}

	// Log in: / leads to the login page, the token to the chat.
	b.do("opening the console", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.shot("login")
	b.do("logging in", chromedp.SendKeys(chromedp.ID("token"), "wrong"), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("login-error")))
	if errs := b.errors(); len(errs) != 1 || !strings.Contains(errs[0], "401") {
		t.Fatalf("a wrong token: %q, want one 401", errs)
	}
	b.forget()
	b.do("logging in", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("chat-log")))

	t.Logf("logged in at %v", time.Since(start).Round(time.Millisecond))
	// A background job: its completion arrives in the same page.
	eval[bool](b, `window.sameDocument = true`)
	say("run sleep 1; echo done")
	b.waitFor("the start", chatHas("Started", "sleep 1; echo done"))
	b.waitFor("the completion", chatHas("finished successfully", "done"))
	if !eval[bool](b, `window.sameDocument === true`) {
		t.Fatal("the page reloaded")
	}
	b.shot("chat")

	t.Logf("first job seen at %v", time.Since(start).Round(time.Millisecond))
	// A second job, then /new before it ends: its completion is dropped, and says why.
	say("run sleep 2; echo second-job")
	b.waitFor("the second start", chatHas("Started", "second-job"))
	press("/new")
	b.waitFor("the conversation change", `[...document.querySelectorAll("#chat-log li.divider")].some(li => li.textContent.includes("New conversation"))`)
	b.waitFor("the /new confirmation", chatHas("New conversation"))
	b.shot("chat-after-new")
	deadline := time.Now().Add(30 * time.Second)
	for {
		visit("deliveries?state=dropped", "table")
		if eval[bool](b, `[...document.querySelectorAll("tbody tr")].some(tr => tr.textContent.includes("second-job") && tr.textContent.includes("stale: user_boundary"))`) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the dropped completion is not on the deliveries page:\n%s", b.text())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !eval[bool](b, `document.querySelector('.tabs a[aria-current="page"]').textContent === "Dropped"`) {
		t.Error("the Dropped filter is not marked as the current one")
	}
	b.shot("deliveries-dropped")
	if text := b.text(); strings.Contains(text, "finished successfully") && strings.Contains(text, "echo done") {
		t.Errorf("the dropped filter lists delivered rows:\n%s", text)
	}

	t.Logf("drop seen at %v", time.Since(start).Round(time.Millisecond))
	// A running process's output, live: it writes its last line only once its page is open.
	visit("chat", "#chat-log")
	marker := filepath.Join(t.TempDir(), "go-on")
	say(fmt.Sprintf("run echo tick-1; while [ ! -e %s ]; do sleep 0.1; done; echo tick-2", marker))
	b.waitFor("the ticking job", chatHas("Started", "tick-1"))
	visit("processes", "table")
	if text := b.text(); !contains(text, "second-job", "dropped", "user_boundary", "delivered", "into session", "running") {
		t.Errorf("the processes page does not say what became of the completions:\n%s", text)
	}
	b.shot("processes")
	b.do("opening the running process", chromedp.Click(chromedp.CSS("tbody tr:first-child td a")), chromedp.WaitVisible(chromedp.ID("proc-output")))
	b.waitFor("the output so far", `document.getElementById("proc-output").textContent.includes("tick-1")`)
	eval[bool](b, `window.sameDocument = true`)
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the live output", `document.getElementById("proc-output").textContent.includes("tick-2")`)
	b.waitFor("the end of the process", `document.getElementById("proc-state").textContent.includes("exit 0")`)
	b.waitFor("the completion's delivery", `document.getElementById("proc-outcome").textContent.includes("delivered into session")`)
	if !eval[bool](b, `window.sameDocument === true`) {
		t.Fatal("the process page reloaded")
	}
	b.shot("process")

	t.Logf("live output seen at %v", time.Since(start).Round(time.Millisecond))
	// /compress and /branch: the chat says where the conversation went.
	visit("chat", "#chat-log")
	divider := func(what string) string {
		return fmt.Sprintf(`[...document.querySelectorAll("#chat-log li.divider")].some(li => li.textContent.includes(%q))`, what)
	}
	press("/compress")
	b.waitFor("the compression", divider("Compressed: the conversation continues"))
	press("/branch")
	b.waitFor("the branch", divider("Branched: a copy of the conversation continues"))
	b.waitFor("the /branch confirmation", chatHas("Branched into session"))
	b.shot("chat-compress-branch")

	// Sessions: the chat's key, and its current session's lineage: the session /new ended, the
	// one compressed, its continuation, the branch.
	visit("sessions", "table")
	b.shot("sessions")
	b.do("opening the chat's key", chromedp.Click(chromedp.CSS("tbody tr:first-child td a")), chromedp.WaitVisible(chromedp.CSS(".tree")))
	if text := b.text(); !contains(text, "agent:main:echo:dm:42", "current", "Transcript", "compression", "branch", "session_reset") {
		t.Errorf("the session page:\n%s", text)
	}
	if n := eval[int](b, `document.querySelectorAll(".tree .node").length`); n != 4 {
		t.Errorf("the lineage has %d sessions, want 4 (new, reset, compression, branch)", n)
	}
	b.shot("session")

	t.Logf("sessions seen at %v", time.Since(start).Round(time.Millisecond))
	// A stranger's DM on the side profile gets a pairing code; the plugins page approves it, the
	// stranger is told and admitted.
	strangerSays(t, public, "s1", "hello?")
	sent, ok := stranger.Wait(30*time.Second, echotest.Has("pairing code"))
	if !ok {
		t.Fatalf("no pairing code sent; the stranger got %+v", stranger.Messages())
	}
	code := regexp.MustCompile(`approve ([A-Z0-9]{8})`).FindStringSubmatch(sent.Text)
	if code == nil {
		t.Fatalf("no code in %q", sent.Text)
	}
	visit("plugins#pairing", ".plugin")
	b.shot("plugins-pairing")
	approve := fmt.Sprintf(`#pairing-open tr[data-code=%q] button`, code[1])
	b.do("approving "+code[1], chromedp.Click(chromedp.CSS(approve)), chromedp.WaitVisible(chromedp.CSS(".notice")))
	if text := b.text(); !contains(text, "Approved stranger on echo/side", "No open codes") {
		t.Errorf("the plugins page after approving:\n%s", text)
	}
	b.shot("plugins-approved")
	if _, ok := stranger.Wait(30*time.Second, echotest.Has("approved you")); !ok {
		t.Errorf("the stranger was not told; they got %+v", stranger.Messages())
	}
	strangerSays(t, public, "s2", "help")
	if _, ok := stranger.Wait(30*time.Second, echotest.Has("built-in agent")); !ok {
		t.Errorf("the approved stranger got no answer; they got %+v", stranger.Messages())
	}
	t.Logf("pairing approved at %v", time.Since(start).Round(time.Millisecond))

	// Every page: labelled and usable at a phone's width.
	pages := []struct{ path, ready string }{{"chat", "#chat-log"}, {"sessions", "table"}, {"processes", "table"},
		{"deliveries", "table"}, {"plugins", ".plugin"}, {"sessions/show?id=agent:main:echo:dm:42", ".tree"}}
	for _, p := range pages {
		visit(p.path, p.ready)
		if problems := eval[[]string](b, audit); len(problems) > 0 {
			t.Errorf("%s: %v", p.path, problems)
		}
	}
	b.do("a phone's width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateTouch))
	for _, p := range pages {
		visit(p.path, p.ready)
		if n := eval[int](b, overflow); n > 0 {
			t.Errorf("%s is %dpx wider than a phone's screen", p.path, n)
		}
		b.shot("phone-" + strings.NewReplacer("/", "-", "?", "-", "=", "-", ":", "-").Replace(p.path))
	}
	b.do("a desktop's width", chromedp.EmulateViewport(1280, 900))

	t.Logf("pages audited at %v", time.Since(start).Round(time.Millisecond))
	// A broken file replaces echo.wasm: rejected, and the loaded version keeps serving.
	visit("plugins", ".plugin")
	if text := b.text(); !contains(text, "echo", "active", "serving", "webhook", "send") {
		t.Errorf("the plugins page before the replacement:\n%s", text)
	}
	broken := filepath.Join(plugins, ".echo.wasm.tmp")
	os.WriteFile(broken, []byte("\x00asm\x01\x00\x00\x00 truncated"), 0o644)
	if err := os.Rename(broken, filepath.Join(plugins, "echo.wasm")); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		visit("plugins", ".plugin")
		if eval[bool](b, `[...document.querySelectorAll(".rejected li")].some(li => li.textContent.includes("echo.wasm"))`) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("echo.wasm is not shown as rejected:\n%s", b.text())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !eval[bool](b, `document.getElementById("plugin-echo").textContent.includes("active")`) {
		t.Errorf("the loaded echo plugin is not shown active:\n%s", b.text())
	}
	b.shot("plugins-rejected")
	visit("chat", "#chat-log")
	say("help")
	b.waitFor("an answer from the old version", chatHas("built-in agent"))

	t.Logf("rejection seen at %v", time.Since(start).Round(time.Millisecond))
	// Nothing from elsewhere; no errors.
	if n := b.requestCount(); n < 20 {
		t.Fatalf("only %d requests recorded: the recorder is not working", n)
	}
	if f := b.foreign(base); len(f) > 0 {
		t.Errorf("pages loaded from outside the host: %q", f)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("the pages logged errors: %q", errs)
	}
}

// TestConsoleRefusesWithoutLogin asks the real binary for every console page, form and event
// stream without logging in: pages and forms send the browser to the login page (a form's
// action is not done), streams and the script's requests are refused (401). The admin listener's own guards apply to the console too: a DNS-rebinding page
// (a foreign Host) and another site's page (Origin, Sec-Fetch-Site) are refused even the login
// page. The public listener does not serve the console at all.
func TestConsoleRefusesWithoutLogin(t *testing.T) {
	stranger := echotest.New()
	defer stranger.Close()
	public, admin, _, _ := consoleHost(t, stranger)
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path string
		want         int
		header       []string
	}{
		{"GET", "/console/chat", 303, nil}, {"GET", "/console/sessions", 303, nil}, {"GET", "/console/sessions/show?id=x", 303, nil},
		{"GET", "/console/processes", 303, nil}, {"GET", "/console/processes/proc_000000000000", 303, nil},
		{"GET", "/console/deliveries?state=dropped", 303, nil}, {"GET", "/console/plugins", 303, nil},
		{"GET", "/console/chat/events", 401, nil}, {"GET", "/console/processes/proc_000000000000/events", 401, nil},
		{"GET", "/console/session", 401, nil}, {"GET", "/console/live?src=/console/processes", 401, nil},
		// A form post without a session goes to the login page; the pages' script, asking for
		// JSON, gets 401 (and takes the browser there itself).
		{"POST", "/console/chat", 303, nil}, {"POST", "/console/logout", 303, nil},
		{"POST", "/console/chat", 401, []string{"Accept", "application/json"}},
		{"POST", "/console/pairing/approve", 303, nil}, {"POST", "/console/pairing/revoke", 303, nil},
		{"POST", "/console/processes/proc_000000000000/kill", 303, nil}, {"POST", "/console/deliveries/d_0/retry", 303, nil},
		{"POST", "/console/plugins/echo/reload", 303, nil},
		{"GET", "/console/login", 200, nil},
		{"GET", "/console/login", 403, []string{"Host", "evil.example:8485"}},
		{"POST", "/console/login", 403, []string{"Origin", "http://evil.example"}},
		{"GET", "/console/chat", 403, []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+admin+tc.path, strings.NewReader("text=sh+id"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(tc.header); i += 2 {
			if tc.header[i] == "Host" {
				req.Host = tc.header[i+1]
			} else {
				req.Header.Set(tc.header[i], tc.header[i+1])
			}
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want || tc.want == 303 && !strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
			t.Errorf("%s %s %q: %d %q, want %d", tc.method, tc.path, tc.header, resp.StatusCode, resp.Header.Get("Location"), tc.want)
		}
	}
	for _, path := range []string{"/", "/console/login", "/console/chat"} {
		resp, err := cl.Get("http://" + public + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("the public listener answered %s with %d", path, resp.StatusCode)
		}
	}
}
