// Package httpguard holds what stands between the host's HTTP listeners and the network: servers
// with every timeout set, the admin listener's checks (bearer token, Host allow-list against DNS
// rebinding, no cross-site browser requests) and the public listener's refusal of browser
// requests, and the secret files (admin token, demo secret) the host generates into its data
// directory.
package httpguard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/internal/httpjson"
)

// Server timeouts. A webhook answer waits for the plugin's call (10 s by default) and for the
// events to be recorded, so the write timeout leaves room for both.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 60 * time.Second
	IdleTimeout       = 120 * time.Second
	MaxHeaderBytes    = 64 << 10
)

// NewServer returns an http.Server for h with every timeout set.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
}

// Refusals counts requests the guards refused, by listener and reason.
type Refusals struct{ c *prometheus.CounterVec }

// NewRefusals registers the counter with reg (nil: not registered).
func NewRefusals(reg prometheus.Registerer) *Refusals {
	r := &Refusals{c: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_http_refused_total",
		Help: "HTTP requests refused by the listeners' guards, by listener and reason."}, []string{"listener", "reason"})}
	if reg != nil {
		reg.MustRegister(r.c)
	}
	return r
}

func (r *Refusals) refuse(w http.ResponseWriter, listener, reason string, status int, msg string) {
	r.count(listener, reason)
	httpjson.Write(w, status, map[string]any{"ok": false, "error": reason, "message": msg})
}

func (r *Refusals) count(listener, reason string) {
	if r != nil {
		r.c.WithLabelValues(listener, reason).Inc()
	}
}

// Admin guards the admin listener. Every request must name an allowed Host and must not come
// from another site's page (Origin, Sec-Fetch-Site); every request but the open ones must carry
// the bearer token.
type Admin struct {
	Token string
	// Hosts are Host names (without port) the listener answers besides the loopback names.
	Hosts []string
	// Open reports requests that need no token (health, the demo plugin's own posts, which
	// carry their own secret).
	Open     func(*http.Request) bool
	Refusals *Refusals
	// Throttle limits wrong tokens per client (nil: not limited). Only requests that carry a
	// token count: a request without one is refused, but guesses nothing.
	Throttle *Throttle
}

// loopbackHosts are always allowed.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// Wrap returns h behind the admin checks.
func (a *Admin) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.hostAllowed(r.Host) {
			a.Refusals.refuse(w, "admin", "host_not_allowed", http.StatusForbidden,
				"this listener does not answer for that Host (add it to admin_hosts)")
			return
		}
		if why := CrossSite(r); why != "" {
			a.Refusals.refuse(w, "admin", why, http.StatusForbidden, "cross-site requests are refused")
			return
		}
		if a.Open == nil || !a.Open(r) {
			guess := r.Header.Get("Authorization") != ""
			if guess && !a.Throttle.Allow(w, r, "admin token") {
				a.Refusals.count("admin", "throttled")
				return
			}
			if !a.authorized(r) {
				if guess {
					a.Throttle.Fail(r)
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="hermes-host"`)
				a.Refusals.refuse(w, "admin", "unauthorized", http.StatusUnauthorized,
					"send Authorization: Bearer <token>; the token is in <data_dir>/admin.token")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (a *Admin) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	return slices.Contains(loopbackHosts, host) || slices.ContainsFunc(a.Hosts, func(h string) bool { return strings.EqualFold(h, host) })
}

func (a *Admin) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || a.Token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(a.Token)) == 1
}

// CrossSite reports why r looks like a request another page made, or "". Browsers send
// Sec-Fetch-Site on every request and Origin on every cross-origin POST; curl, platforms and
// plugins send neither. A page is same-origin only if its Origin names this very host and port
// (the Host itself was checked against the allow-list).
func CrossSite(r *http.Request) string {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "cross_site"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return "cross_origin"
		}
	}
	return ""
}

// NoBrowsers guards the public listener: webhooks come from platforms, never from a browser, so
// a request a browser marks as coming from a page (any Origin, or Sec-Fetch-Site other than
// none) is refused.
func NoBrowsers(h http.Handler, ref *Refusals) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		site := r.Header.Get("Sec-Fetch-Site")
		if r.Header.Get("Origin") != "" || site != "" && site != "none" {
			ref.refuse(w, "public", "browser_request", http.StatusForbidden, "webhooks do not accept requests from web pages")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Secret returns the secret kept in the file at path, creating it (32 random bytes, hex, mode
// 0600) if it does not exist. A file readable by others is refused: the secret may have leaked.
func Secret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		var raw [32]byte
		rand.Read(raw[:])
		s := hex.EncodeToString(raw[:])
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return Secret(path) // created meanwhile by another process
		}
		if err != nil {
			return "", err
		}
		if _, err := f.WriteString(s + "\n"); err != nil {
			f.Close()
			return "", err
		}
		return s, f.Close()
	}
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by other users (mode %v): remove it and restart to generate a new one", path, fi.Mode().Perm())
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty: remove it and restart to generate a new one", path)
	}
	return s, nil
}

// ReadSecret reads a secret file without creating it.
func ReadSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
