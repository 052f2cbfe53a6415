package console

import (
	"bytes"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/humanize"
)

// page is one page's template set: the layout and the page's own content.
type page struct{ t *template.Template }

// view is what the layout renders; Data is the page's own.
type view struct {
	Title   string
	Nav     string // the section the page belongs to
	Session *login // nil on the login page
	Data    any
	Now     time.Time
	Prefix  string
	// Notice says what the operator's last action did (once, after its redirect).
	Notice string
	// Back is the page's own address, where its action forms come back to.
	Back string
}

var funcs = template.FuncMap{
	"ago":       func(now, t time.Time) string { return humanize.Duration(now.Sub(t)) },
	"until":     func(now, t time.Time) string { return humanize.Duration(t.Sub(now)) },
	"dur":       humanize.Duration,
	"clock":     humanize.Clock,
	"clip":      humanize.Clip,
	"tools":     humanize.Tools,
	"lines":     lastLines,
	"hasPrefix": strings.HasPrefix,
	"list":      func(s ...string) []string { return s },
	"prefix":    func() string { return Prefix },
	// retryable: the deliveries page shows the retry button only for a row the ledger would
	// retry (the server checks again when it is pressed).
	"retryable": func(r delivery.Row) bool { return r.Retryable() == nil },
	"query":     func(v url.Values) string { return v.Encode() },
}

// parsePages parses every page under templates/ with the layout.
func parsePages() map[string]*page {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html"))
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*page{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t := template.Must(template.Must(layout.Clone()).ParseFS(files, n))
		out[name] = &page{t: t}
	}
	return out
}

// render writes a page: status, then the page in the layout. A template error is a bug; the
// operator gets a plain error instead of half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, s *login, title string, data any) {
	nav, _, _ := strings.Cut(name, "-")
	var buf bytes.Buffer
	err := c.pages[name].t.ExecuteTemplate(&buf, "layout.html", view{Title: title, Nav: nav, Session: s, Data: data,
		Now: time.Now(), Prefix: Prefix, Notice: c.logins.takeFlash(s), Back: localPath(r.URL.RequestURI())})
	if err != nil {
		c.Log.Error("console: rendering a page failed", "page", name, "error", err)
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail shows an error page (a store error, a missing process).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *login, status int, err error) {
	c.render(w, r, status, "error", s, "Error", err.Error())
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
