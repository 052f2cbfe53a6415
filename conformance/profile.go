package conformance

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/host"
)

// This file holds what platform profiles (conformance/<platform>) share: recording their checks
// into a Report, and watching which export posts messages. They load the plugin into a
// host.Env of their own (host.NewEnv), whose kv store and connections outlive a reload.

// Checks records a profile's checks into Report.
type Checks struct {
	Report *Report
}

// Add records a result: passed when err is nil (with detail), failed with err's text otherwise.
func (c *Checks) Add(name string, start time.Time, err error, detail string) {
	r := Result{Name: name, Passed: err == nil, Took: time.Since(start)}
	if err != nil {
		r.Detail = err.Error()
	} else {
		r.Detail = detail
	}
	c.Report.Results = append(c.Report.Results, r)
}

// Run runs one check, turning a panic into its failure, and reports whether it passed.
func (c *Checks) Run(name string, f func() (detail string, err error)) (ok bool) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			c.Add(name, start, fmt.Errorf("check panicked: %v\n%s", r, debug.Stack()), "")
			ok = false
		}
	}()
	detail, err := f()
	c.Add(name, start, err, detail)
	return err == nil
}

// OffSend records the calls a plugin made, from an export other than send, to API methods that
// post into a conversation, and that egress let through. Only send runs inside the session
// boundary, after the stale check, with a ledger row; a message posted from anywhere else
// bypasses all three. Platform profiles make one with NewOffSend, give its Egressed to the
// host.Env they load the plugin into (host.EnvOptions.Egressed), and report Check.
type OffSend struct {
	api     string // the API's name in the failure, e.g. "Slack", "the Bot API"
	posting func(method string) bool

	mu    sync.Mutex
	calls []string // "export: method"
}

// NewOffSend records into a new OffSend every call to a method posting reports as posting (the
// last path element of the URL) made from another export than send; api names the platform's
// API in the failure.
func NewOffSend(api string, posting func(method string) bool) *OffSend {
	return &OffSend{api: api, posting: posting}
}

// Egressed is told of an HTTP request a plugin made through hermes_http (host.EnvOptions.Egressed).
func (o *OffSend) Egressed(c host.Caller, _ string, u *url.URL, err error) {
	method := path.Base(u.Path)
	if c.Export == abi.ExportSend || !o.posting(method) || abi.CodeOf(err) == abi.CodeDenied {
		return
	}
	o.mu.Lock()
	o.calls = append(o.calls, c.Export+": "+method)
	o.mu.Unlock()
}

// Check fails when any posting call outside send reached the API during the run.
func (o *OffSend) Check() (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.calls) > 0 {
		return "", fmt.Errorf("%d message-posting calls outside send reached %s (%s): only send may post, inside the host's guarded path; declare egress_scopes so the host refuses them",
			len(o.calls), o.api, strings.Join(o.calls[:min(len(o.calls), 5)], ", "))
	}
	return "every message-posting call came from send", nil
}

// Sample is a webhook request a platform profile ships (its samples directory: requests shaped
// as the platform documents and sends them), with what any correct adapter makes of it. The
// profiles run their samples through the plugin's webhook; authors can also give the files to
// the generic suite (--webhook-sample) or to `hermes-host call`.
type Sample struct {
	WebhookSample
	// Want are the events the request must become, in order; none for a request that must be
	// accepted (2xx) without an event (an edit, the bot's own message).
	Want []Expect
}

// Expect is what one event made of a Sample must carry. Empty fields are not checked; Kind is
// compared as the host reads it (empty is a message).
type Expect struct {
	Kind, ChatType, ChatID, ThreadID, UserID string
	Text                                     string // contained in the event's text
	Mentioned                                bool   // the event says the bot was mentioned
}

// CheckSample says how res, the webhook's answer to sample, falls short of it: a status other
// than 2xx, another number of events, or an event missing what sample.Want names.
func CheckSample(sample Sample, res *abi.WebhookResult) error {
	if st := res.Response.Status; st < 200 || st > 299 {
		return fmt.Errorf("%s: answered %d %q, want a 2xx", sample.Name, st, clip(res.Response.Body))
	}
	if len(res.Events) != len(sample.Want) {
		return fmt.Errorf("%s: %d events, want %d", sample.Name, len(res.Events), len(sample.Want))
	}
	var errs []error
	for i, w := range sample.Want {
		e := res.Events[i]
		kind := e.Kind
		if kind == "" {
			kind = abi.EventMessage
		}
		for _, f := range []struct{ field, got, want string }{
			{"kind", kind, w.Kind}, {"chat_type", e.Source.ChatType, w.ChatType}, {"chat_id", e.Source.ChatID, w.ChatID},
			{"thread_id", e.Source.ThreadID, w.ThreadID}, {"user_id", e.Source.UserID, w.UserID},
		} {
			if f.want != "" && f.got != f.want {
				errs = append(errs, fmt.Errorf("%s: event %d has %s %q, want %q", sample.Name, i, f.field, f.got, f.want))
			}
		}
		if e.ID == "" {
			errs = append(errs, fmt.Errorf("%s: event %d has no id (the platform redelivers: it must be deduplicated)", sample.Name, i))
		}
		if !strings.Contains(e.Text, w.Text) {
			errs = append(errs, fmt.Errorf("%s: event %d has text %q, want it to contain %q", sample.Name, i, e.Text, w.Text))
		}
		if w.Mentioned && !e.Mentioned {
			errs = append(errs, fmt.Errorf("%s: event %d does not say the bot was mentioned", sample.Name, i))
		}
	}
	return errors.Join(errs...)
}

// LoadSamples reads the *.json files of dir in fsys (a profile's embedded samples directory) as
// Samples, in name order, each with its expectations from want (keyed by file name). A file
// without an entry in want, or an entry without its file, is an error: every shipped sample is
// checked.
func LoadSamples(fsys fs.FS, dir string, want map[string][]Expect) ([]Sample, error) {
	fsys, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, err
	}
	var out []Sample
	seen := map[string]bool{}
	for _, name := range names {
		w, ok := want[name]
		if !ok {
			return nil, fmt.Errorf("sample %s has no expectations", name)
		}
		seen[name] = true
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, Sample{WebhookSample: WebhookSample{Name: name, Body: body}, Want: w})
	}
	for name := range want {
		if !seen[name] {
			return nil, fmt.Errorf("expectations for %s, which is not a sample", name)
		}
	}
	return out, nil
}

// MustLoadSamples is LoadSamples for a profile's embedded samples, whose files and table its
// own tests check: it panics on an error.
func MustLoadSamples(fsys fs.FS, dir string, want map[string][]Expect) []Sample {
	s, err := LoadSamples(fsys, dir, want)
	if err != nil {
		panic(err)
	}
	return s
}
