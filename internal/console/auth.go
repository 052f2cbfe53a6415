package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/internal/httpguard"
)

// Cookies the console sets. Both are HttpOnly and SameSite=Strict: a page on another site can
// neither read them nor make the browser send them.
const (
	sessionCookie = "hermes_console"       // the console session, after login
	loginCookie   = "hermes_console_login" // ties the login form to the browser that loaded it
)

// Session limits: a login lasts a day; the console keeps at most maxLogins (the oldest go).
const (
	loginTTL  = 24 * time.Hour
	maxLogins = 64
)

// login is one logged-in browser.
type login struct {
	id      string
	csrf    string // carried by every form of this session
	expires time.Time
	notice  string // what the last action did, shown once by the next page (sessions.mu)
}

// CSRF is the token the session's forms carry.
func (s *login) CSRF() string { return s.csrf }

// checkCSRF reports whether r's form carries the session's CSRF token.
func (s *login) checkCSRF(r *http.Request) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}

// sessions are the console's logins, in memory: a restart logs everyone out.
type sessions struct {
	mu   sync.Mutex
	byID map[string]*login
	now  func() time.Time
}

func newSessions() *sessions { return &sessions{byID: map[string]*login{}, now: time.Now} }

// create starts a session.
func (ss *sessions) create() *login {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	for id, s := range ss.byID {
		if now.After(s.expires) {
			delete(ss.byID, id)
		}
	}
	for len(ss.byID) >= maxLogins {
		var oldest *login
		for _, s := range ss.byID {
			if oldest == nil || s.expires.Before(oldest.expires) {
				oldest = s
			}
		}
		delete(ss.byID, oldest.id)
	}
	s := &login{id: randomToken(), csrf: randomToken(), expires: now.Add(loginTTL)}
	ss.byID[s.id] = s
	return s
}

// get returns the live session r's cookie names, or nil.
func (ss *sessions) get(r *http.Request) *login {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byID[ck.Value]
	if s == nil {
		return nil
	}
	if ss.now().After(s.expires) {
		delete(ss.byID, s.id)
		return nil
	}
	return s
}

// alive reports whether s is still logged in (streams end when it is not).
func (ss *sessions) alive(s *login) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.byID[s.id] == s && !ss.now().After(s.expires)
}

// flash keeps notice for s's next page.
func (ss *sessions) flash(s *login, notice string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s.notice = notice
}

// takeFlash returns and forgets s's notice.
func (ss *sessions) takeFlash(s *login) string {
	if s == nil {
		return ""
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	n := s.notice
	s.notice = ""
	return n
}

func (ss *sessions) end(s *login) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byID, s.id)
}

func randomToken() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// sameOrigin reports whether r comes from the console's own pages (or from no page at all, like
// curl): the admin listener's own check, repeated here so that the console is safe on any mux.
func sameOrigin(r *http.Request) bool { return httpguard.CrossSite(r) == "" }

// localPath returns p if it is a path on this host, else the chat: a login never redirects
// elsewhere.
func localPath(p string) string {
	if !strings.HasPrefix(p, Prefix) || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n") {
		return Prefix + "chat"
	}
	return p
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

type loginView struct {
	Next, Form, Error string
	// Ended: the browser came with a session this host does not know (it restarted, the
	// session expired or was logged out elsewhere).
	Ended bool
}

// loggedOut answers a request without a live session. A page goes to the login page, which
// brings the operator back to it; a form post goes there too, back to the page the form was on
// (what was typed is not kept: the session that would vouch for it is gone). The pages' script
// (event streams, the session probe, posts asking for JSON) gets 401 with the login page's
// address, and takes the browser there itself. A browser that presented a session cookie is told
// its session ended (after a restart of the host, most often).
func (c *Console) loggedOut(w http.ResponseWriter, r *http.Request, rt route) {
	back := r.URL.RequestURI()
	if r.Method != http.MethodGet || rt.stream || rt.api {
		back = refererPath(r) // the page the form or the script is on
	}
	q := url.Values{"next": {localPath(back)}}
	if ck, err := r.Cookie(sessionCookie); err == nil && ck.Value != "" {
		q.Set("ended", "1")
	}
	login := Prefix + "login?" + q.Encode()
	if rt.stream || rt.api || strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "the console session ended: log in again", "login": login})
		return
	}
	http.Redirect(w, r, login, http.StatusSeeOther)
}

// refererPath is the console page r's form was on, or the chat.
func refererPath(r *http.Request) string {
	u, err := url.Parse(r.Referer())
	if err != nil || u.Path == "" {
		return Prefix + "chat"
	}
	p := u.EscapedPath()
	if u.RawQuery != "" {
		p += "?" + u.RawQuery
	}
	return p
}

// sessionProbe answers 204 while the session lives (the guard answers 401 once it does not): the
// pages' script asks when an event stream breaks, to tell a host that is down (no answer) from
// one that restarted (401).
func (c *Console) sessionProbe(w http.ResponseWriter, r *http.Request, _ *login) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// loginPage shows the login form. Its hidden field matches a cookie set with it, so a login
// form posted from another site (login CSRF) is refused.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request, _ *login) {
	if c.logins.get(r) != nil {
		http.Redirect(w, r, localPath(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	c.showLogin(w, r, http.StatusOK, "")
}

func (c *Console) showLogin(w http.ResponseWriter, r *http.Request, status int, problem string) {
	form := randomToken()
	setCookie(w, r, loginCookie, form, 3600)
	next := r.URL.Query().Get("next")
	if r.Method == http.MethodPost {
		next = r.PostFormValue("next")
	}
	c.render(w, r, status, "login", nil, "Log in", loginView{Next: localPath(next), Form: form, Error: problem,
		Ended: r.URL.Query().Get("ended") != "" && problem == ""})
}

func (c *Console) loginPost(w http.ResponseWriter, r *http.Request, _ *login) {
	if !sameOrigin(r) {
		http.Error(w, "cross-origin requests are refused", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	ck, err := r.Cookie(loginCookie)
	form := r.PostFormValue("form")
	if err != nil || form == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(form)) != 1 {
		c.showLogin(w, r, http.StatusForbidden, "This login form has expired. Try again.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token != "" && !c.LoginThrottle.Allow(w, r, "console login") {
		return
	}
	if c.Tokens == nil || token == "" || !c.Tokens.Valid(token) {
		if token != "" {
			c.LoginThrottle.Fail(r)
		}
		c.Log.Warn("console: login refused (wrong admin token)", "remote", r.RemoteAddr)
		c.showLogin(w, r, http.StatusUnauthorized, "That is not the admin token.")
		return
	}
	s := c.logins.create()
	setCookie(w, r, sessionCookie, s.id, int(loginTTL/time.Second))
	setCookie(w, r, loginCookie, "", -1)
	c.Log.Info("console: logged in", "remote", r.RemoteAddr)
	http.Redirect(w, r, localPath(r.PostFormValue("next")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *login) {
	c.logins.end(s)
	setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// StaticToken is a Tokens that accepts one token.
type StaticToken string

// Valid compares in constant time; an empty StaticToken accepts nothing.
func (t StaticToken) Valid(token string) bool {
	return t != "" && subtle.ConstantTimeCompare([]byte(token), []byte(t)) == 1
}
