package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/store"
)

// This file holds what platform profiles (conformance/<platform>) share: recording their checks
// into a Report, and the host environment they load a plugin into.

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

// NewEnv is a host environment for the profile named profile, in a temporary directory of its
// own: a kv store (which outlives a plugin "restart" within the run), an egress client, and d
// as hermes_dispatch (nil: unavailable). The returned function releases it and removes the
// directory.
func NewEnv(ctx context.Context, profile string, d plugin.Dispatcher) (*plugin.Env, func(), error) {
	dir, err := os.MkdirTemp("", "hermes-conformance-"+profile+"-")
	if err != nil {
		return nil, nil, err
	}
	db, err := store.Open(filepath.Join(dir, "kv.db"), store.Options{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	kvs, err := kv.Open(ctx, db)
	if err != nil {
		db.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	eg := egress.NewClient(egress.Limits{})
	env := &plugin.Env{KV: kvs, Egress: eg, Dispatcher: d, Logger: slog.New(slog.DiscardHandler)}
	return env, func() { eg.Close(); db.Close(); os.RemoveAll(dir) }, nil
}

// OffSend records the calls a plugin made, from an export other than send, to API methods that
// post into a conversation, and that egress let through. Only send runs inside the session
// boundary, after the stale check, with a ledger row; a message posted from anywhere else
// bypasses all three. Platform profiles install one with WatchOffSend and report Check.
type OffSend struct {
	api     string // the API's name in the failure, e.g. "Slack", "the Bot API"
	posting func(method string) bool

	mu    sync.Mutex
	calls []string // "export: method"
}

// WatchOffSend records into a new OffSend every call through env's egress to a method posting
// reports as posting (the last path element of the URL) made from another export than send.
func WatchOffSend(env *plugin.Env, api string, posting func(method string) bool) *OffSend {
	o := &OffSend{api: api, posting: posting}
	env.Egressed = func(c plugin.Caller, _ string, u *url.URL, err error) {
		method := path.Base(u.Path)
		if c.Export == abi.ExportSend || !posting(method) || abi.CodeOf(err) == abi.CodeDenied {
			return
		}
		o.mu.Lock()
		o.calls = append(o.calls, c.Export+": "+method)
		o.mu.Unlock()
	}
	return o
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
