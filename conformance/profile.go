package conformance

import (
	"fmt"
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
