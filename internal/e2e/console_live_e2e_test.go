package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hermes-host/hermes-host/internal/e2e/e2etest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// TestConsoleAcrossARestart drives the console in chromium against the real binary while the
// host restarts and works:
//   - the host is killed under an open chat page: the page says the connection is lost; the host
//     starts again on the same data directory, token and (pinned) admin port; the page finds its
//     session gone, goes to the login page, which says the session ended, and after the login
//     comes back to the chat, where a new message gets its reply;
//   - a message posted with curl to /demo/inbox starts a background process: the processes
//     page, open meanwhile, lists it without reloading;
//   - Kill on that row: the process ends "killed by the operator", the page says so, and the
//     completion column then shows its notice delivered, again without a reload; the chat shows
//     the curl message (via /demo/inbox) and the kill's notice.
func TestConsoleAcrossARestart(t *testing.T) {
	b := newBrowser(t) // first: without chromium the test skips (or fails) before starting a host
	bin := hostBinary(t)
	plugins := filepath.Join(t.TempDir(), "plugins")
	os.MkdirAll(plugins, 0o755)
	wasmbuild.CopyTo(t, "../../plugins/echo", filepath.Join(plugins, "echo.wasm"))
	data := t.TempDir()
	admin := freeAddr(t) // pinned: the page reconnects to the same address
	cfg := filepath.Join(data, "hermes.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`plugins:
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "http://%s/demo/outbox"}
    access:
      main: {allow_all: true, tools: [shell, processes]}
`, admin)), 0o600)
	h := e2etest.New(bin, plugins, data, "--config", cfg, "--admin-listen", admin)
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	token, err := h.Token()
	if err != nil {
		t.Fatal(err)
	}
	console := "http://" + admin + "/console/"
	say := func(text string) {
		t.Helper()
		b.do("typing "+text, chromedp.SendKeys(chromedp.ID("say-text"), text), chromedp.Click(chromedp.CSS("#chat-form button")))
	}
	login := func() {
		t.Helper()
		b.do("logging in", chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), token),
			chromedp.Submit(chromedp.ID("token")))
	}

	b.do("opening the chat", chromedp.Navigate(console+"chat"))
	login()
	b.waitFor("the chat", `location.pathname === "/console/chat" && !!document.getElementById("chat-log")`)
	b.waitFor("the live indicator", `document.getElementById("conn").dataset.state === "ok"`)
	say("help")
	b.waitFor("the first reply", chatHas("built-in agent"))
	replies := eval[int](b, `document.querySelectorAll("#chat-log li.host").length`)

	// The host goes away under the open page, and comes back on the same port.
	h.Stop()
	b.waitFor("the lost connection", `document.getElementById("conn").dataset.state === "bad" && document.getElementById("conn").textContent.includes("lost")`)
	b.shot("restart-lost")
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	if h.Admin != admin {
		t.Fatalf("the host came back on %s, not on the pinned %s", h.Admin, admin)
	}
	// Its sessions lived in its memory: the page goes to the login page, which says why.
	b.waitForUpTo(60*time.Second, "the login page after the restart", `location.pathname === "/console/login" && !!document.getElementById("session-ended")`)
	if !eval[bool](b, `new URLSearchParams(location.search).get("next") === "/console/chat"`) {
		t.Fatalf("the login page does not lead back to the chat: %s", eval[string](b, `location.href`))
	}
	b.shot("restart-login")
	login()
	b.waitFor("back in the chat", `location.pathname === "/console/chat" && !!document.getElementById("chat-log")`)
	b.waitFor("the live indicator again", `document.getElementById("conn").dataset.state === "ok"`)
	say("help")
	b.waitFor("a reply from the new host", `document.querySelectorAll("#chat-log li.host").length >= 1 && `+chatHas("built-in agent"))
	b.shot("restart-reply")
	t.Logf("before the restart the chat showed %d replies; after it, a new one", replies)
	b.forget() // the refused connections while the host was down are logged as errors

	// The processes page, open while a curl message starts a process: the row appears live.
	b.do("opening the processes page", chromedp.Navigate(console+"processes"), chromedp.WaitVisible(chromedp.ID("processes")))
	b.waitFor("the processes page following its list", `document.getElementById("conn").dataset.state === "ok"`)
	eval[bool](b, `window.sameDocument = true`)
	marker := "sleep 120; echo never-printed"
	if code := adminRequest(t, "POST", admin, data, "/demo/inbox",
		fmt.Sprintf(`{"id":"curl-1","chat_id":"42","user_id":"me","text":%q}`, "run "+marker), nil); code != 200 {
		t.Fatalf("/demo/inbox answered %d", code)
	}
	row := fmt.Sprintf(`[...document.querySelectorAll("#processes tbody tr")].find(tr => tr.textContent.includes(%q))`, marker)
	b.waitFor("the new process, live", `(() => { const tr = `+row+`; return !!tr && tr.dataset.state === "running" })()`)
	if !eval[bool](b, `window.sameDocument === true`) {
		t.Fatal("the processes page reloaded")
	}
	id := eval[string](b, row+`.dataset.id`)
	b.shot("processes-live")

	// Kill it from its row.
	b.do("killing "+id, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#processes tr[data-id=%q] button`, id))),
		chromedp.WaitVisible(chromedp.ID("notice")))
	if text := b.text(); !contains(text, "Killed "+id) {
		t.Fatalf("the page after the kill:\n%s", text)
	}
	eval[bool](b, `window.sameDocument = true`)
	b.waitFor("the killed process", `(() => { const tr = `+row+`; return !!tr && tr.dataset.state !== "running" && tr.textContent.includes("killed by the operator") })()`)
	b.waitFor("its notice delivered, live", `(() => { const tr = `+row+`; return !!tr && tr.dataset.outcome === "delivered" })()`)
	if !eval[bool](b, `window.sameDocument === true`) {
		t.Fatal("the processes page reloaded")
	}
	b.shot("processes-killed")

	// The chat has the whole conversation: the curl message, and the notice of the kill.
	b.do("opening the chat", chromedp.Navigate(console+"chat"), chromedp.WaitVisible(chromedp.ID("chat-log")))
	b.waitFor("the curl message in the chat", fmt.Sprintf(`[...document.querySelectorAll("#chat-log li.you")].some(li => li.textContent.includes(%q) && li.textContent.includes("/demo/inbox"))`, marker))
	b.waitFor("the kill's notice", chatHas("was stopped", id))
	b.shot("chat-curl")
	if f := b.foreign("http://" + admin); len(f) > 0 {
		t.Errorf("pages loaded from outside the host: %q", f)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("the pages logged errors: %q", errs)
	}
}
