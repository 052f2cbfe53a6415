// Package console is the operator's web console, served on the admin HTTP surface: a chat on
// the loopback demo platform with replies and background-process notifications arriving live,
// and views of the sessions, background processes, the delivery ledger and the plugins, where
// the operator also approves pairing requests.
//
// Pages are rendered on the server with html/template; a little plain JavaScript from the
// embedded static files sends chat messages and follows Server-Sent Events. Nothing is loaded
// from outside the host, and the Content-Security-Policy allows no inline script or style.
//
// Every page, event stream and form needs a console session: the login page takes the admin
// token (checked through Tokens) and sets an HttpOnly, SameSite=Strict cookie. Every form
// carries the session's CSRF token, and state-changing requests and event streams from another
// origin are refused.
package console

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/internal/actions"
	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/demo"
	"github.com/hermes-host/hermes-host/internal/httpguard"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
)

// Prefix is where the console's pages live; Register also redirects / to the chat.
const Prefix = "/console/"

// maxForm caps a form the console accepts.
const maxForm = 64 << 10

//go:embed templates static
var files embed.FS

// Console holds what the pages read. Tokens is an interface, so that the console does not care
// how the gateway keeps its admin token.
type Console struct {
	// Tokens checks the admin token typed on the login page. Nil: nobody can log in.
	Tokens Tokens
	// Chat is the loopback demo chat; nil: the chat page says the demo is off.
	Chat *demo.Chat
	// ChatKey is the session key of Chat's conversation (for the session it is in).
	ChatKey string
	// ChatName says where Chat is, e.g. "chat 42 on echo/main".
	ChatName string

	Plugins   *plugin.Runtime
	Sessions  *session.Kernel
	Processes *process.Registry
	Ledger    *delivery.Ledger
	// Approvals are the requests of commands that waited for a person, shown on a session's
	// page; nil: not shown.
	Approvals *approval.Store
	// Pairing is the authorization gate: the plugins page lists its open pairing codes and
	// approves them. Nil: the page says pairing is not available.
	Pairing *auth.Gate
	// Actions kill processes, reload plugins and retry deliveries (the admin API's own); nil:
	// ones on Processes, Plugins and Ledger.
	Actions *actions.Actions
	// Metrics is where the plugin call latencies and crash counts are read from.
	Metrics prometheus.Gatherer
	Log     *slog.Logger
	// LoginThrottle limits wrong admin tokens on the login page and CodeThrottle wrong pairing
	// codes, per client (nil: not limited); the host shares them with the admin API.
	LoginThrottle, CodeThrottle *httpguard.Throttle

	once   sync.Once
	pages  map[string]*page
	logins *sessions
	done   chan struct{}
	closed sync.Once
}

// Tokens checks a token an operator presents.
type Tokens interface {
	// Valid reports whether token is the admin token.
	Valid(token string) bool
}

// route is one of the console's endpoints. Every route that is not public needs a console
// session; every POST also needs the session's CSRF token and a same-origin request.
type route struct {
	method, path string
	public       bool // the login page and the static files
	stream       bool // a Server-Sent Events stream
	api          bool // read by the pages' script: answers 401 without a session, not a redirect
	handle       func(c *Console, w http.ResponseWriter, r *http.Request, s *login)
}

// routes lists every endpoint; the tests walk it, so an endpoint cannot skip the checks.
var routes = []route{
	{method: "GET", path: "/{$}", public: true, handle: (*Console).home},
	{method: "GET", path: Prefix + "{$}", public: true, handle: (*Console).home},
	{method: "GET", path: Prefix + "static/{file}", public: true, handle: (*Console).static},
	{method: "GET", path: Prefix + "login", public: true, handle: (*Console).loginPage},
	{method: "POST", path: Prefix + "login", public: true, handle: (*Console).loginPost},
	{method: "POST", path: Prefix + "logout", handle: (*Console).logout},
	{method: "GET", path: Prefix + "chat", handle: (*Console).chatPage},
	{method: "POST", path: Prefix + "chat", handle: (*Console).chatPost},
	{method: "GET", path: Prefix + "chat/events", stream: true, handle: (*Console).chatEvents},
	{method: "GET", path: Prefix + "session", api: true, handle: (*Console).sessionProbe},
	{method: "GET", path: Prefix + "live", stream: true, handle: (*Console).liveEvents},
	{method: "GET", path: Prefix + "sessions", handle: (*Console).sessionsPage},
	{method: "GET", path: Prefix + "sessions/show", handle: (*Console).sessionPage},
	{method: "GET", path: Prefix + "processes", handle: (*Console).processesPage},
	{method: "GET", path: Prefix + "processes/{id}", handle: (*Console).processPage},
	{method: "GET", path: Prefix + "processes/{id}/events", stream: true, handle: (*Console).processEvents},
	{method: "POST", path: Prefix + "processes/{id}/kill", handle: (*Console).kill},
	{method: "GET", path: Prefix + "deliveries", handle: (*Console).deliveriesPage},
	{method: "POST", path: Prefix + "deliveries/{id}/retry", handle: (*Console).retry},
	{method: "GET", path: Prefix + "plugins", handle: (*Console).pluginsPage},
	{method: "POST", path: Prefix + "plugins/{name}/reload", handle: (*Console).reload},
	{method: "POST", path: Prefix + "pairing/approve", handle: (*Console).approve},
	{method: "POST", path: Prefix + "pairing/revoke", handle: (*Console).revoke},
}

func (c *Console) init() {
	c.once.Do(func() {
		c.pages = parsePages()
		c.logins = newSessions()
		c.done = make(chan struct{})
		if c.Log == nil {
			c.Log = slog.New(slog.DiscardHandler)
		}
		if c.Actions == nil {
			c.Actions = &actions.Actions{Processes: c.Processes, Plugins: c.Plugins, Ledger: c.Ledger, Log: c.Log}
		}
	})
}

// Register adds the console's routes to mux.
func (c *Console) Register(mux *http.ServeMux) {
	c.init()
	for _, rt := range routes {
		mux.Handle(rt.method+" "+rt.path, c.guard(rt))
	}
}

// Owns reports whether the console serves r's path (the admin listener's guard lets these
// through to the console's own session checks).
func Owns(r *http.Request) bool {
	return r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, Prefix)
}

// Close ends the open event streams (call it when the server shuts down: streams do not end on
// their own).
func (c *Console) Close() {
	c.init()
	c.closed.Do(func() { close(c.done) })
}

// guard applies the headers every answer carries and the session, CSRF and origin checks.
func (c *Console) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secureHeaders(w.Header())
		if rt.public {
			rt.handle(c, w, r, nil)
			return
		}
		if (rt.stream || rt.api || r.Method != http.MethodGet) && !sameOrigin(r) {
			http.Error(w, "cross-origin requests are refused", http.StatusForbidden)
			return
		}
		s := c.logins.get(r)
		if s == nil {
			c.loggedOut(w, r, rt)
			return
		}
		if r.Method != http.MethodGet {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		}
		if r.Method != http.MethodGet && !s.checkCSRF(r) {
			http.Error(w, "the form is stale or forged (CSRF token mismatch): reload the page", http.StatusForbidden)
			return
		}
		rt.handle(c, w, r, s)
	})
}

// secureHeaders are on every answer: no script, style, frame or connection from anywhere but
// this host, no inline script or style, nothing framed, nothing sniffed, no referrer.
func secureHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: that would make forms post Origin: null
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

func (c *Console) home(w http.ResponseWriter, r *http.Request, _ *login) {
	http.Redirect(w, r, Prefix+"chat", http.StatusSeeOther)
}

func (c *Console) static(w http.ResponseWriter, r *http.Request, _ *login) {
	name := r.PathValue("file")
	b, err := fs.ReadFile(files, "static/"+name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

// pageCtx bounds the database reads of one page.
func pageCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 10*time.Second)
}
