// Package conformance is the suite plugin authors run against their plugin
// (hermes-host conformance my-plugin.wasm) and CI runs against every first-party plugin. It
// loads the .wasm through the production runtime and checks the contract: the ABI marker and
// exports, a valid manifest, and that every export answers empty, malformed and oversized
// input with an error instead of trapping.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/host"
)

// Result is the outcome of one check.
type Result struct {
	Name   string        `json:"name"`
	Passed bool          `json:"passed"`
	Detail string        `json:"detail,omitempty"`
	Took   time.Duration `json:"took_ns"`
}

// Report is the outcome of a run.
type Report struct {
	File     string        `json:"file"`
	Manifest *abi.Manifest `json:"manifest,omitempty"`
	Results  []Result      `json:"results"`
}

// Passed reports whether every check passed.
func (r *Report) Passed() bool {
	for _, x := range r.Results {
		if !x.Passed {
			return false
		}
	}
	return len(r.Results) > 0
}

// Write prints the report as a table with a summary line.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "conformance: %s\n", r.File)
	if r.Manifest != nil {
		fmt.Fprintf(w, "plugin: %s %s (%s, platform %s)\n", r.Manifest.Name, r.Manifest.Version, r.Manifest.Kind, r.Manifest.Platform)
	}
	failed := 0
	for _, x := range r.Results {
		mark := "PASS"
		if !x.Passed {
			mark, failed = "FAIL", failed+1
		}
		fmt.Fprintf(w, "  %s  %-34s %s\n", mark, x.Name, x.Detail)
	}
	if failed == 0 {
		fmt.Fprintf(w, "ok: %d checks passed\n", len(r.Results))
	} else {
		fmt.Fprintf(w, "FAILED: %d of %d checks\n", failed, len(r.Results))
	}
}

// String is the report as Write prints it.
func (r *Report) String() string {
	var b strings.Builder
	r.Write(&b)
	return b.String()
}

// Result returns the outcome of the check called name, and whether the run has it.
func (r *Report) Result(name string) (Result, bool) {
	for _, x := range r.Results {
		if x.Name == name {
			return x, true
		}
	}
	return Result{}, false
}

// Options tune a run.
type Options struct {
	// Config is the configuration of the profile the normal-path checks use (a JSON object);
	// empty means {}.
	Config json.RawMessage
	// CallTimeout bounds each call into the plugin (default: the host's default, 10s).
	CallTimeout time.Duration
	// CacheDir is the compilation cache; empty uses the user cache directory.
	CacheDir string
	// WebhookSamples are requests as the plugin's platform posts them (an update the author
	// captured or wrote): each is given to the webhook, for the profile configured by Config,
	// and must be accepted (2xx) with a valid result whose events are well formed. The suite's
	// own request ({}) is refused by most plugins, which leaves their normal path unchecked.
	WebhookSamples []WebhookSample
}

// WebhookSample is one webhook request as the platform sends it.
type WebhookSample struct {
	Name    string              // shown in the report (a file name)
	Headers map[string][]string // besides Content-Type: application/json
	Body    []byte              // raw, as posted
}

// Run runs the contract checks against the plugin file at path.
func Run(ctx context.Context, path string, opt Options) *Report {
	rep := &Report{File: path}
	add := (&Checks{Report: rep}).Add
	start := time.Now()
	// The breaker is off: a plugin that crashes on one bad input is reported for that input,
	// and the next checks still run against a fresh instance.
	p, err := host.LoadPlugin(ctx, path, host.PluginOptions{CallTimeout: opt.CallTimeout, NoBreaker: true, CacheDir: opt.CacheDir})
	if err != nil {
		add("load (marker, exports, describe)", start, err, "")
		return rep
	}
	defer p.Close()
	info := p.Info()
	rep.Manifest = &info.Manifest
	add("load (marker, exports, describe)", start, nil, fmt.Sprintf("ABI %s, loaded in %v", info.ABI, time.Since(start).Round(time.Millisecond)))

	// Every export, given bad input, must answer with an error, not trap.
	exports := []string{abi.ExportConfigure, abi.ExportSend}
	if info.Manifest.Has(abi.CapWebhook) {
		exports = append(exports, abi.ExportWebhook)
	}
	if info.Manifest.Has(abi.CapPoll) {
		exports = append(exports, abi.ExportPoll)
	}
	if info.Manifest.Has(abi.CapAttachments) {
		exports = append(exports, abi.ExportFetch)
	}
	if info.Manifest.Kind == abi.KindScheduler {
		exports = []string{abi.ExportConfigure, abi.ExportTick}
		if info.Manifest.Has(abi.CapJobs) {
			exports = append(exports, abi.ExportJobs)
		}
	}
	// A megabyte of unterminated JSON reaches the plugin; a payload over the host's input cap is
	// refused by the host before the plugin runs.
	huge := append([]byte(`{"profile":"conformance","config":{},"junk":"`), bytes.Repeat([]byte("A"), 1<<20)...)
	limit := p.MaxInput()
	inputs := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"malformed", []byte(`{"profile": "main", "config": {`)},
		{"wrong-types", []byte(`{"profile": 7, "message": "not an object", "wait_ms": "soon"}`)},
		{"no-profile", []byte(`{"config": {}}`)},
		{"huge-malformed", huge},
		{"over-cap", bytes.Repeat([]byte(" "), limit+1)},
	}
	for _, export := range exports {
		for _, in := range inputs {
			start := time.Now()
			_, err := p.Call(ctx, "conformance", export, in.in)
			switch {
			case errors.Is(err, host.ErrCrashed):
				add(export+"/"+in.name, start, fmt.Errorf("trapped: %v", err), "")
			case err == nil:
				add(export+"/"+in.name, start, errors.New("accepted bad input without an error"), "")
			default:
				add(export+"/"+in.name, start, nil, "error: "+firstLine(err.Error()))
			}
		}
	}
	// describe ignores its input and must keep answering the same manifest.
	start = time.Now()
	out, err := p.Call(ctx, "", abi.ExportDescribe, []byte("garbage"))
	var m abi.Manifest
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	if err == nil && m.Name != info.Manifest.Name {
		err = fmt.Errorf("describe answered name %q, then %q", info.Manifest.Name, m.Name)
	}
	add("describe/stable", start, err, "")

	// Normal operation: well-formed requests, answers validated against the ABI's schema.
	normalPath(ctx, p, info.Manifest, opt.Config, opt.WebhookSamples, add)

	// The instance must still be healthy after all that.
	start = time.Now()
	_, err = p.Call(ctx, "", abi.ExportDescribe, nil)
	if err == nil && p.Info().State != "active" {
		err = errors.New("plugin is marked failed")
	}
	add("still-healthy", start, err, fmt.Sprintf("%d instance(s) live", p.Info().Instances))
	return rep
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}
