package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/humanize"
)

// pairingView is the plugins page's pairing section: the open codes strangers got from a bot,
// and the users approved so far.
type pairingView struct {
	Enabled  bool
	Pending  []auth.Request
	Approved []auth.Approval
	// Notice says what the last approval or revocation did (after its redirect).
	Notice string
	Error  string
}

// pairing reads the pairing section; done is the code just approved or the user just revoked
// (the redirect's query), turned into a notice only when the listing confirms it.
func (c *Console) pairing(r *http.Request) pairingView {
	if c.Pairing == nil {
		return pairingView{}
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	pending, approved, err := c.Pairing.Pairing(ctx)
	v := pairingView{Enabled: true, Pending: pending, Approved: approved}
	if err != nil {
		v.Error = "reading the pairing requests failed: " + err.Error()
		return v
	}
	q := r.URL.Query()
	if code := q.Get("approved"); code != "" {
		for _, a := range approved {
			if a.Code == code {
				v.Notice = "Approved " + who(a.UserID, a.UserName) + " on " + a.Plugin + "/" + a.Profile +
					": they are told in their chat and admitted from their next message, with " + humanize.Tools(a.Tools) + "."
			}
		}
	}
	if user := q.Get("revoked"); user != "" {
		v.Notice = "Revoked " + user + " on " + q.Get("plugin") + "/" + q.Get("profile") + ": their messages are refused again."
		for _, a := range approved {
			if a.UserID == user && a.Plugin == q.Get("plugin") && a.Profile == q.Get("profile") {
				v.Notice = "" // approved again since: the link is stale
			}
		}
	}
	return v
}

func who(id, name string) string {
	if name != "" {
		return id + " (" + name + ")"
	}
	return id
}

// pairingFailed shows err, if any, as an error page: 404 when it is notFound (an unknown code, a
// user not approved), else 500. It reports whether there was an error.
func (c *Console) pairingFailed(w http.ResponseWriter, r *http.Request, s *login, err, notFound error) bool {
	switch {
	case errors.Is(err, notFound):
		c.fail(w, r, s, http.StatusNotFound, err)
	case err != nil:
		c.fail(w, r, s, http.StatusInternalServerError, err)
	}
	return err != nil
}

// approve approves a pairing code (the form's "code"), as `hermes-host pairing approve` does.
func (c *Console) approve(w http.ResponseWriter, r *http.Request, s *login) {
	if c.Pairing == nil {
		c.fail(w, r, s, http.StatusNotFound, errors.New("pairing is not available on this host"))
		return
	}
	code := strings.ToUpper(strings.TrimSpace(r.PostFormValue("code")))
	if !c.CodeThrottle.Allow(w, r, "pairing code") {
		return
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	a, err := c.Pairing.Approve(ctx, code)
	if errors.Is(err, auth.ErrNoCode) {
		c.CodeThrottle.Fail(r)
	}
	if c.pairingFailed(w, r, s, err, auth.ErrNoCode) {
		return
	}
	c.Log.Info("console: pairing approved", "plugin", a.Plugin, "profile", a.Profile, "user", a.UserID, "remote", r.RemoteAddr)
	http.Redirect(w, r, Prefix+"plugins?approved="+url.QueryEscape(a.Code)+"#pairing", http.StatusSeeOther)
}

// revoke removes a user's approval on one plugin profile (the form's user, plugin, profile).
func (c *Console) revoke(w http.ResponseWriter, r *http.Request, s *login) {
	if c.Pairing == nil {
		c.fail(w, r, s, http.StatusNotFound, errors.New("pairing is not available on this host"))
		return
	}
	user, plugin, profile := r.PostFormValue("user"), r.PostFormValue("plugin"), r.PostFormValue("profile")
	if user == "" || plugin == "" || profile == "" {
		c.fail(w, r, s, http.StatusBadRequest, errors.New("revoking needs the user, the plugin and the profile"))
		return
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	_, err := c.Pairing.Revoke(ctx, user, plugin, profile)
	if c.pairingFailed(w, r, s, err, auth.ErrNotApproved) {
		return
	}
	c.Log.Info("console: pairing revoked", "plugin", plugin, "profile", profile, "user", user, "remote", r.RemoteAddr)
	q := url.Values{"revoked": {user}, "plugin": {plugin}, "profile": {profile}}
	http.Redirect(w, r, Prefix+"plugins?"+q.Encode()+"#pairing", http.StatusSeeOther)
}
