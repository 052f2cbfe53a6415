package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/hermes-host/hermes-host/internal/actions"
)

// The console's actions are forms on the processes, deliveries and plugins pages. They call the
// admin API's own functions (internal/actions) behind the console's login, CSRF and origin
// checks, and go back to the page the form was on (its "back" field) with a line saying what was
// done; a refusal is an error page with the reason and the action's status (409 for a process
// that is not running or a delivery that may have been sent).

// back sends the browser back to the page the form was on, which shows notice once (kept with
// the session, not in the address: a link cannot make the console claim something was done).
func (c *Console) back(w http.ResponseWriter, r *http.Request, s *login, fallback, notice string) {
	back := r.PostFormValue("back")
	if !strings.HasPrefix(back, Prefix) || back != localPath(back) {
		back = fallback
	}
	c.logins.flash(s, notice)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// kill stops a running background process.
func (c *Console) kill(w http.ResponseWriter, r *http.Request, s *login) {
	id := r.PathValue("id")
	in, err := c.Actions.KillProcess(r.Context(), id, "console "+r.RemoteAddr)
	if err != nil {
		c.fail(w, r, s, actions.Status(err), err)
		return
	}
	c.back(w, r, s, Prefix+"processes/"+url.PathEscape(id), "Killed "+id+": "+string(in.State)+", exit "+in.ExitStatus()+
		". Its conversation is told; the completion column says where the notice went.")
}

// retry sends a failed delivery again, if it certainly was not sent.
func (c *Console) retry(w http.ResponseWriter, r *http.Request, s *login) {
	id := r.PathValue("id")
	row, err := c.Actions.RetryDelivery(r.Context(), id, "console "+r.RemoteAddr)
	if err != nil {
		c.fail(w, r, s, actions.Status(err), err)
		return
	}
	c.back(w, r, s, Prefix+"deliveries?q="+url.QueryEscape(id), "Sending "+row.ID+" again ("+row.Kind+" to "+row.Key+").")
}

// reload loads a plugin again from its file.
func (c *Console) reload(w http.ResponseWriter, r *http.Request, s *login) {
	name := r.PathValue("name")
	info, err := c.Actions.ReloadPlugin(r.Context(), name, "console "+r.RemoteAddr)
	if err != nil {
		c.fail(w, r, s, actions.Status(err), err)
		return
	}
	c.back(w, r, s, Prefix+"plugins", "Reloaded "+name+" "+info.Manifest.Version+": "+info.State+".")
}
