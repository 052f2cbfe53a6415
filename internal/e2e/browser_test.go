package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// The browser tests run Debian's chromium (apt-get install chromium; `make test` installs it).
// Without it they skip, unless HERMES_REQUIRE_TOOLS is set (by `make test`), when they fail.
// Screenshots go to $HERMES_TEST_ARTIFACTS/<test>/, or to a new temporary directory that is kept
// (its path is logged).

// chromium returns the browser's path, or skips or fails the test when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	requireTool(t, "chromium")
	p, _ := exec.LookPath("chromium")
	return p
}

// browser is one headless chromium tab. It records every request the pages make and every
// error they log or throw (a Content-Security-Policy violation is one).
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string

	mu       sync.Mutex
	requests []string
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	// chromedp's defaults (headless, no first run, no background networking, no sync…), and
	// what a machine without a network and a GPU needs besides.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.DisableGPU,
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, shots: artifacts(t)}
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev.Request.URL)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				b.problems = append(b.problems, fmt.Sprintf("%s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		case *runtime.EventExceptionThrown:
			b.problems = append(b.problems, "exception: "+ev.ExceptionDetails.Text)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				b.problems = append(b.problems, "console.error")
			}
		}
	})
	if err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

// artifacts is the directory the test's screenshots go to.
func artifacts(t *testing.T) string {
	root := os.Getenv("HERMES_TEST_ARTIFACTS")
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("", "hermes-test-artifacts-"); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(root, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// do runs actions, failing the test on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testdeadline.Scale(60*time.Second))
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testdeadline.Scale(30*time.Second))
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition in the page for up to 30 s (stretched by the harness's
// factor, internal/testdeadline).
func (b *browser) waitFor(what, cond string) {
	b.t.Helper()
	b.waitForUpTo(30*time.Second, what, cond)
}

// waitForUpTo is waitFor for up to d (stretched by the harness's factor). The condition may
// hold only on another page (a redirect, a form's answer): a poll that the navigation cut short
// starts again on the new page.
func (b *browser) waitForUpTo(d time.Duration, what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(testdeadline.Scale(d))
	for {
		left := time.Until(deadline)
		ctx, cancel := context.WithTimeout(b.ctx, left+5*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(left)))
		cancel()
		if err == nil {
			return
		}
		if navigated(err) && time.Until(deadline) > 0 {
			continue
		}
		b.t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, b.text())
	}
}

// navigated reports an evaluation the page's navigation interrupted.
func navigated(err error) bool {
	s := err.Error()
	return strings.Contains(s, "navigated or closed") || strings.Contains(s, "context was destroyed") ||
		strings.Contains(s, "Cannot find context")
}

// text is the page's main text.
func (b *browser) text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").innerText : document.body.innerText`))
	return s
}

// shot saves a full-page screenshot as name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// foreign returns the requests the pages made to anything but base (scheme, host and port).
func (b *browser) foreign(base string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	want, _ := url.Parse(base)
	var out []string
	for _, r := range b.requests {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != want.Scheme || u.Host != want.Host {
			out = append(out, r)
		}
	}
	return out
}

func (b *browser) requestCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.requests)
}

// forget drops the errors logged so far (an expected refusal).
func (b *browser) forget() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = nil
}

func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// audit is what the pages promise a screen-reader and keyboard user: a language, one h1, a main
// landmark, a label for every field, a name for every button and link, a caption for every table.
const audit = `(() => {
  const p = [];
  if (!document.documentElement.lang) p.push("no lang on html");
  const h1 = document.querySelectorAll("h1").length;
  if (h1 !== 1) p.push(h1 + " h1 elements");
  if (!document.querySelector("main")) p.push("no main landmark");
  for (const el of document.querySelectorAll("input:not([type=hidden]), textarea, select")) {
    if (!(el.labels && el.labels.length) && !el.getAttribute("aria-label")) p.push("field without a label: " + (el.name || el.id));
  }
  for (const el of document.querySelectorAll("button, a[href]")) {
    if (!el.textContent.trim() && !el.getAttribute("aria-label")) p.push("nameless " + el.outerHTML.slice(0, 80));
  }
  for (const t of document.querySelectorAll("table")) if (!t.querySelector("caption")) p.push("table without a caption");
  return p;
})()`

// overflow is how far the page is wider than the viewport (0: it fits; a phone has no room to
// scroll sideways).
const overflow = `Math.max(0, document.documentElement.scrollWidth - window.innerWidth)`

// contains reports whether s has every one of subs.
func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
