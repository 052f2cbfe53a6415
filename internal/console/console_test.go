package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/demo"
	"github.com/hermes-host/hermes-host/internal/httpguard"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

const testToken = "the-admin-token"

// fixture is a console on a real store, session kernel, process registry, ledger and plugin
// runtime (with no plugins), served on loopback. Its demo chat's platform refuses everything
// (404), which the console reports.
type fixture struct {
	t     *testing.T
	c     *Console
	srv   *httptest.Server
	procs *process.Registry
	proc  string // a finished process's id
	first string // the chat's first session, compressed into the current one
	code  string // an open pairing code, of user "stranger" on echo/side
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "hermes.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	k, err := session.Open(ctx, db, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	procs, err := process.New(ctx, db, process.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { procs.Close() })
	ledger, err := delivery.Open(ctx, db, k, nil, delivery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := plugin.New(plugin.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	key, err := k.Key(abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: "42", UserID: "me"})
	if err != nil {
		t.Fatal(err)
	}
	// A conversation with a message, compressed once: a session and its continuation.
	src := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: "42", UserID: "me"}
	first, err := k.Resolve(ctx, src, session.ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		if _, err := b.Append(first.SessionID, session.Message{Role: "user", Text: "a message before compression"}); err != nil {
			return err
		}
		_, err := b.Compress(first.SessionID, "the summary")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A stranger's DM on a profile without a policy: refused, with a pairing code.
	gate, err := auth.Open(ctx, db, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := gate.Admit(ctx, "echo", "side", abi.InboundEvent{ID: "e1", Text: "hi", Source: abi.Source{Platform: "echo",
		Profile: "side", ChatType: abi.ChatDM, ChatID: "7", UserID: "stranger", UserName: "Stranger"}}); err != nil || d.Verdict != auth.Refuse {
		t.Fatalf("the stranger's DM: %+v %v", d, err)
	}
	pending, _, err := gate.Pairing(ctx)
	if err != nil || len(pending) != 1 {
		t.Fatalf("pairing codes %+v %v", pending, err)
	}
	c := &Console{Tokens: StaticToken(testToken), Plugins: rt, Sessions: k, Processes: procs, Ledger: ledger, Pairing: gate,
		Metrics: prometheus.NewRegistry(), Chat: &demo.Chat{ChatID: "42", UserID: "me", Hook: http.NotFoundHandler()},
		ChatKey: key, ChatName: "chat 42 on echo/main"}
	mux := http.NewServeMux()
	c.Register(mux)
	f := &fixture{t: t, c: c, srv: httptest.NewServer(mux), procs: procs, first: first.SessionID, code: pending[0].Code}
	t.Cleanup(f.srv.Close)
	t.Cleanup(c.Close) // before the server closes: its streams end
	res, err := procs.Spawn(ctx, process.SpawnRequest{Command: "echo hello-from-the-process",
		Stamp: session.Stamp{Key: key, SessionID: first.SessionID, Profile: "main", Generation: first.Generation, Route: src}})
	if err != nil {
		t.Fatal(err)
	}
	f.proc = res.ID
	if _, err := procs.Wait(ctx, res.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return f
}

// path fills a route's wildcards.
func (f *fixture) path(rt route) string {
	p := strings.NewReplacer("{id}", f.proc, "{file}", "console.css", "{name}", "echo", "{$}", "").Replace(rt.path)
	if strings.HasSuffix(p, "sessions/show") {
		p += "?id=" + url.QueryEscape(f.c.ChatKey)
	}
	if strings.HasSuffix(p, "/live") {
		p += "?src=" + url.QueryEscape(Prefix+"processes")
	}
	return p
}

// client is a browser-like client that keeps cookies and does not follow redirects.
func (f *fixture) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) do(cl *http.Client, method, path string, form url.Values, header ...string) (*http.Response, string) {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, f.srv.URL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b []byte
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		b = make([]byte, 64) // an open stream: its first bytes are enough
		n, _ := io.ReadAtLeast(resp.Body, b, 1)
		b = b[:n]
	} else {
		b, _ = io.ReadAll(resp.Body)
	}
	return resp, string(b)
}

var hidden = regexp.MustCompile(`name="(form|csrf)" value="([^"]+)"`)

// login logs cl in with token and returns the answer to the login POST.
func (f *fixture) login(cl *http.Client, token string) *http.Response {
	f.t.Helper()
	_, page := f.do(cl, "GET", Prefix+"login", nil)
	m := hidden.FindStringSubmatch(page)
	if m == nil {
		f.t.Fatalf("no form token on the login page:\n%s", page)
	}
	resp, _ := f.do(cl, "POST", Prefix+"login", url.Values{"form": {m[2]}, "token": {token}, "next": {Prefix + "processes"}})
	return resp
}

// csrf reads the CSRF token from a page.
func (f *fixture) csrf(cl *http.Client) string {
	f.t.Helper()
	_, page := f.do(cl, "GET", Prefix+"chat", nil)
	m := hidden.FindStringSubmatch(page)
	if m == nil || m[1] != "csrf" {
		f.t.Fatalf("no CSRF token on the chat page:\n%s", page)
	}
	return m[2]
}

// TestRefusedWithoutLogin: every page, form and event stream refuses a request without a
// console session (none, a made-up one, an expired one, a logged-out one); pages send the
// browser to the login page, and nothing of the page is in the answer.
func TestRefusedWithoutLogin(t *testing.T) {
	f := newFixture(t)
	expired := f.client()
	f.login(expired, testToken)
	loggedOut := f.client()
	f.login(loggedOut, testToken)
	f.do(loggedOut, "POST", Prefix+"logout", url.Values{"csrf": {f.csrf(loggedOut)}})
	for _, s := range f.c.logins.byID {
		s.expires = time.Now().Add(-time.Second) // only expired's session is left
	}
	forged := f.client()
	u, _ := url.Parse(f.srv.URL + Prefix)
	forged.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: randomToken()}})

	// Only the login page, the static files and the redirects to the chat need no session.
	open := map[string]bool{"GET /{$}": true, "GET " + Prefix + "{$}": true, "GET " + Prefix + "static/{file}": true,
		"GET " + Prefix + "login": true, "POST " + Prefix + "login": true}
	checked := 0
	for _, rt := range routes {
		if rt.public {
			if !open[rt.method+" "+rt.path] {
				t.Errorf("%s %s is public", rt.method, rt.path)
			}
			continue
		}
		for name, cl := range map[string]*http.Client{"none": f.client(), "forged": forged, "expired": expired, "logged out": loggedOut} {
			var form url.Values
			if rt.method == "POST" {
				form = url.Values{"text": {"sh touch /tmp/pwned"}}
			}
			resp, body := f.do(cl, rt.method, f.path(rt), form, "Referer", f.srv.URL+Prefix+"processes?q=x")
			// A browser that came with a session cookie is told its session ended (logging out
			// removed the cookie).
			ended := map[bool]string{true: "ended=1&", false: ""}[name == "forged" || name == "expired"]
			switch {
			case rt.stream || rt.api:
				if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"login"`) {
					t.Errorf("%s %s (%s session): %d %s, want 401 with the login page", rt.method, rt.path, name, resp.StatusCode, body)
				}
			case rt.method == "GET":
				if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), Prefix+"login?"+ended+"next=") {
					t.Errorf("%s %s (%s session): %d %q, want a redirect to the login page", rt.method, rt.path, name, resp.StatusCode, resp.Header.Get("Location"))
				}
			default:
				// A form post goes to the login page, which brings the operator back to the
				// page the form was on.
				want := Prefix + "login?" + ended + "next=" + url.QueryEscape(Prefix+"processes?q=x")
				if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
					t.Errorf("%s %s (%s session): %d %q, want a redirect to %s", rt.method, rt.path, name, resp.StatusCode, resp.Header.Get("Location"), want)
				}
			}
			if strings.Contains(body, "hello-from-the-process") || strings.Contains(body, "<table") || strings.Contains(body, "event:") {
				t.Errorf("%s %s (%s session) leaked the page: %q", rt.method, rt.path, name, body)
			}
			if resp.Header.Get("Content-Security-Policy") == "" {
				t.Errorf("%s %s: refusal without a Content-Security-Policy", rt.method, rt.path)
			}
			checked++
		}
	}
	if checked < 4*10 {
		t.Fatalf("only %d refusals checked", checked)
	}
	if msgs, _ := f.c.Chat.Since(0); len(msgs) != 0 {
		t.Fatalf("a refused POST reached the chat: %+v", msgs)
	}
}

// TestLogin: a wrong token, a login form from elsewhere and a cross-site login are refused; the
// right token sets an HttpOnly, SameSite=Strict session cookie that opens every page and stream.
func TestLogin(t *testing.T) {
	f := newFixture(t)
	cl := f.client()
	if resp := f.login(cl, "not-the-token"); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Set-Cookie") != "" && strings.Contains(resp.Header.Get("Set-Cookie"), sessionCookie+"=") {
		t.Fatalf("wrong token: %d %q", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	// A form whose hidden field does not match the browser's login cookie (posted from elsewhere).
	resp, _ := f.do(f.client(), "POST", Prefix+"login", url.Values{"form": {"guessed"}, "token": {testToken}})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login without the form cookie: %d", resp.StatusCode)
	}
	// A cross-site page posting the login form.
	_, page := f.do(cl, "GET", Prefix+"login", nil)
	form := hidden.FindStringSubmatch(page)[2]
	resp, _ = f.do(cl, "POST", Prefix+"login", url.Values{"form": {form}, "token": {testToken}}, "Origin", "https://evil.example")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin login: %d", resp.StatusCode)
	}

	resp = f.login(cl, testToken)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != Prefix+"processes" {
		t.Fatalf("login: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != Prefix {
		t.Fatalf("session cookie %+v", session)
	}
	for _, rt := range routes {
		if rt.method != "GET" || rt.path == "/{$}" || rt.path == Prefix+"{$}" || rt.path == Prefix+"login" {
			continue
		}
		resp, body := f.do(cl, rt.method, f.path(rt), nil)
		if resp.StatusCode != http.StatusOK && !(rt.api && resp.StatusCode == http.StatusNoContent) {
			t.Errorf("GET %s: %d %s", f.path(rt), resp.StatusCode, body)
		}
		if rt.stream && resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Errorf("GET %s: %q", f.path(rt), resp.Header.Get("Content-Type"))
		}
	}
	// The fixture waited for its result, so its completion notice was suppressed: the page says so.
	if _, body := f.do(cl, "GET", Prefix+"processes/"+f.proc, nil); !strings.Contains(body, "hello-from-the-process") ||
		!strings.Contains(body, "the agent read the result itself") {
		t.Errorf("the process page does not show the output and the notice's state:\n%s", body)
	}
	if resp, body := f.do(cl, "GET", Prefix+"processes/proc_000000000000", nil); resp.StatusCode != http.StatusNotFound ||
		!strings.Contains(body, "no process") {
		t.Errorf("an unknown process: %d\n%s", resp.StatusCode, body)
	}
	// The key's page: the compressed session, then its continuation (current), as a nested tree.
	_, body := f.do(cl, "GET", Prefix+"sessions/show?id="+url.QueryEscape(f.c.ChatKey), nil)
	tree := body[strings.Index(body, `class="tree"`):]
	first, cont := strings.Index(tree, f.first), strings.Index(tree, ">compression<")
	if first < 0 || cont < first || !strings.Contains(tree[first:cont], "<ul>") || !strings.Contains(tree[cont:], ">current<") {
		t.Errorf("the lineage tree:\n%s", tree)
	}
	// Open redirects: next must be a console path.
	for _, next := range []string{"https://evil.example/", "//evil.example/", "/\\evil.example", Prefix + "chat\r\nX: y"} {
		if got := localPath(next); got != Prefix+"chat" {
			t.Errorf("localPath(%q) = %q", next, got)
		}
	}
}

// TestLoginGuessingIsThrottled: after five wrong tokens from one address, the login page
// answers 429 with Retry-After, even to the right token, and the refusal is logged.
func TestLoginGuessingIsThrottled(t *testing.T) {
	f := newFixture(t)
	var logs strings.Builder
	f.c.LoginThrottle = httpguard.NewThrottle(5, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)))
	cl := f.client()
	for i := range 5 {
		if resp := f.login(cl, "guess-"+strconv.Itoa(i)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d", i+1, resp.StatusCode)
		}
	}
	resp := f.login(cl, testToken)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the right token after five wrong ones: %d (Retry-After %q), want 429", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(logs.String(), "console login") {
		t.Errorf("the refusal is not logged:\n%s", logs.String())
	}
}

// TestFormsNeedCSRF: a logged-in browser's POST without the session's CSRF token, with another
// session's, or from another origin is refused before it reaches the chat; with it, the message
// goes to the demo platform (which here refuses it, and the console says so).
func TestFormsNeedCSRF(t *testing.T) {
	f := newFixture(t)
	cl, other := f.client(), f.client()
	f.login(cl, testToken)
	f.login(other, testToken)
	token, otherToken := f.csrf(cl), f.csrf(other)
	say := url.Values{"text": {"hello"}}
	for name, tc := range map[string]struct {
		csrf   string
		header []string
	}{
		"no token":        {},
		"another session": {csrf: otherToken},
		"cross origin":    {csrf: token, header: []string{"Origin", "https://evil.example"}},
		"cross site":      {csrf: token, header: []string{"Sec-Fetch-Site", "cross-site"}},
		"null origin":     {csrf: token, header: []string{"Origin", "null"}},
	} {
		form := url.Values{"text": say["text"]}
		if tc.csrf != "" {
			form.Set("csrf", tc.csrf)
		}
		resp, _ := f.do(cl, "POST", Prefix+"chat", form, tc.header...)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	if msgs, _ := f.c.Chat.Since(0); len(msgs) != 0 {
		t.Fatalf("a refused POST reached the chat: %+v", msgs)
	}
	for _, rt := range routes {
		if rt.stream {
			if resp, _ := f.do(cl, "GET", f.path(rt), nil, "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden {
				t.Errorf("cross-site %s: %d", rt.path, resp.StatusCode)
			}
		}
	}
	resp, body := f.do(cl, "POST", Prefix+"chat", url.Values{"csrf": {token}, "text": {"hello"}}, "Accept", "application/json",
		"Origin", f.srv.URL, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "refused the message (404)") {
		t.Fatalf("a good POST: %d %s", resp.StatusCode, body)
	}
	// Logging out needs the token too.
	if resp, _ := f.do(cl, "POST", Prefix+"logout", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("logout without the token: %d", resp.StatusCode)
	}
}

// inlineCode finds what the Content-Security-Policy would block: event-handler attributes,
// style attributes and elements, javascript: URLs, and anything from another host. Scripts are
// checked one by one: each must have a src and no body.
var (
	inlineCode = regexp.MustCompile(`(?i)\son[a-z]+=|\sstyle=|<style|javascript:|(?:src|href|action)="(?:https?:)?//`)
	scriptTag  = regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script>`)
)

// TestPagesNeedNoInlineCode renders every page and checks it against the policy's rules, and
// that every answer carries the policy.
func TestPagesNeedNoInlineCode(t *testing.T) {
	f := newFixture(t)
	cl := f.client()
	f.login(cl, testToken)
	for _, rt := range routes {
		if rt.method != "GET" || rt.stream {
			continue
		}
		resp, body := f.do(cl, "GET", f.path(rt), nil)
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: policy %q", rt.path, csp)
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			if m := inlineCode.FindString(body); m != "" {
				t.Errorf("%s: %q would need an unsafe policy", rt.path, m)
			}
			for _, m := range scriptTag.FindAllStringSubmatch(body, -1) {
				if !strings.Contains(m[1], `src="/`) || strings.TrimSpace(m[2]) != "" {
					t.Errorf("%s: inline script %q", rt.path, m[0])
				}
			}
		}
	}
}

// TestLogoutEndsStreams: an open event stream ends when its session logs out.
func TestLogoutEndsStreams(t *testing.T) {
	f := newFixture(t)
	cl := f.client()
	f.login(cl, testToken)
	token := f.csrf(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+Prefix+"chat/events", nil)
	resp, err := cl.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", err, resp)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	f.do(cl, "POST", Prefix+"logout", url.Values{"csrf": {token}})
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the stream broke instead of ending: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived its session")
	}
}

// TestPairing: the plugins page lists the open pairing code; approving it (with the session's
// CSRF token) admits the user and says so, an unknown code is a clear 404, and revoking takes
// the approval back.
func TestPairing(t *testing.T) {
	f := newFixture(t)
	cl := f.client()
	f.login(cl, testToken)
	token := f.csrf(cl)
	_, page := f.do(cl, "GET", Prefix+"plugins", nil)
	if !strings.Contains(page, f.code) || !strings.Contains(page, "stranger") || !strings.Contains(page, "Nobody approved") {
		t.Fatalf("the open code is not listed:\n%s", page)
	}
	if resp, _ := f.do(cl, "POST", Prefix+"pairing/approve", url.Values{"code": {f.code}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("approve without the CSRF token: %d", resp.StatusCode)
	}
	if resp, body := f.do(cl, "POST", Prefix+"pairing/approve", url.Values{"csrf": {token}, "code": {"NOSUCH23"}}); resp.StatusCode != http.StatusNotFound ||
		!strings.Contains(body, "unknown or expired") {
		t.Fatalf("an unknown code: %d %s", resp.StatusCode, body)
	}
	resp, _ := f.do(cl, "POST", Prefix+"pairing/approve", url.Values{"csrf": {token}, "code": {strings.ToLower(f.code)}})
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, Prefix+"plugins?approved="+f.code) {
		t.Fatalf("approve: %d %q", resp.StatusCode, loc)
	}
	d, err := f.c.Pairing.Admit(context.Background(), "echo", "side", abi.InboundEvent{ID: "e2", Text: "again", Source: abi.Source{
		Platform: "echo", Profile: "side", ChatType: abi.ChatDM, ChatID: "7", UserID: "stranger"}})
	if err != nil || d.Verdict == auth.Refuse {
		t.Fatalf("the approved user's next DM: %+v %v", d, err)
	}
	_, page = f.do(cl, "GET", loc, nil)
	if !strings.Contains(page, "Approved stranger (Stranger) on echo/side") || !strings.Contains(page, "No open codes") {
		t.Fatalf("after approving:\n%s", page)
	}
	resp, _ = f.do(cl, "POST", Prefix+"pairing/revoke", url.Values{"csrf": {token}, "user": {"stranger"}, "plugin": {"echo"}, "profile": {"side"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if _, page = f.do(cl, "GET", resp.Header.Get("Location"), nil); !strings.Contains(page, "Revoked stranger on echo/side") ||
		!strings.Contains(page, "Nobody approved") {
		t.Fatalf("after revoking:\n%s", page)
	}
	if resp, _ := f.do(cl, "POST", Prefix+"pairing/revoke", url.Values{"csrf": {token}, "user": {"stranger"}, "plugin": {"echo"}, "profile": {"side"}}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("revoking again: %d", resp.StatusCode)
	}
}
