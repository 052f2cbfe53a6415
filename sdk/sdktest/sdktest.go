//go:build !wasip1

// Package sdktest runs a plugin's handlers against a real host, for plugin unit tests.
//
// The same test can drive the plugin two ways, in the manner of proxy-wasm-go-sdk's proxytest:
//
//   - Native: the plugin package's registered handlers run in the test process; host functions
//     are answered by the host's own implementations, so egress policy, kv and profile
//     binding behave exactly as in production. Fast, debuggable, coverage-friendly.
//   - Wasm: the plugin is built to .wasm and loaded through the production runtime.
//
// Both satisfy Host, so a table of cases can run under each.
package sdktest

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/host"
	"github.com/hermes-host/hermes-host/sdk"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// Host is a plugin under test, whichever way it runs.
type Host interface {
	Manifest() abi.Manifest
	Webhook(profile string, req abi.WebhookRequest) (*abi.WebhookResult, error)
	Poll(profile string, wait time.Duration) (*abi.PollResult, error)
	Send(profile string, msg abi.OutboundMessage) (*abi.SendResult, error)
	Tick(profile string, now time.Time) (*abi.TickResult, error)
	Jobs(profile string, req abi.JobsRequest) (*abi.JobsResult, error)
	// Fetch asks for an attachment's bytes, accepting at most maxBytes (ABI 1.2).
	Fetch(profile string, att abi.Attachment, maxBytes int64) (*abi.FetchResult, error)
}

// Options configure the host a plugin runs against.
type Options struct {
	// Profiles maps profile names to their configuration objects.
	Profiles map[string]any
	// EgressExtra grants hosts beyond the manifest's (a loopback fake's 127.0.0.1).
	EgressExtra []string
	// EgressAlias maps a loopback fake's address to the declared host it stands in for: the
	// host's egress scopes then apply to the fake.
	EgressAlias map[string]string
	// State is the plugin's durable host-side state (its kv store). Hosts given the same State
	// share it, so a test can stop one host and start another as a restart would. Nil: a fresh
	// State for this host.
	State *State
	// Sessions, Dispatcher, Sender and Agents answer the session, dispatch, send and agent host
	// functions; nil answers "unavailable", as a host without those services would.
	Sessions   Sessions
	Dispatcher Dispatcher
	Sender     Sender
	Agents     Agents
	// Now is the host clock the plugin reads (hermes_clock); nil: the real clock.
	Now func() time.Time
	// Logger receives the plugin's hermes_log lines (attributed to plugin and profile); nil
	// uses slog.Default.
	Logger *slog.Logger
}

// State is a plugin's durable host-side state: what the host keeps for it across instances and
// restarts (its kv store).
type State struct{ st *host.State }

// NewState returns an empty State, removed when the test ends.
func NewState(t testing.TB) *State {
	t.Helper()
	st, err := host.OpenState(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &State{st: st}
}

// Caller is who made a host-function call: the plugin (by manifest name), its kind and platform,
// the profile of the call in progress and the export it serves.
type Caller = host.Caller

// Sessions answers the session host functions. The source's platform and profile are already
// the caller's own.
type Sessions = host.Sessions

// Dispatcher answers hermes_dispatch.
type Dispatcher = host.Dispatcher

// Sender answers hermes_send (scheduler plugins).
type Sender = host.Sender

// Agents answers hermes_agent (scheduler plugins).
type Agents = host.AgentTurns

// env is the host environment of one host under test, closed when the test ends.
func (o Options) env(t testing.TB) *host.Env {
	st := o.State
	if st == nil {
		st = NewState(t)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	env, err := host.NewEnv(host.EnvOptions{State: st.st, Sessions: o.Sessions, Dispatcher: o.Dispatcher, Sender: o.Sender,
		Agents: o.Agents, Now: o.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

func (o Options) profiles(t testing.TB) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for name, cfg := range o.Profiles {
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// Wasm loads the .wasm at path through the production runtime, compiled through the test run's
// compilation cache (wasmbuild.CompilationCacheDir: HERMES_COMPILATION_CACHE when set), so a
// plugin loaded by many tests is compiled once.
func Wasm(t testing.TB, path string, o Options) Host {
	t.Helper()
	p, err := host.LoadPlugin(context.Background(), path, host.PluginOptions{
		Env: o.env(t), Profiles: o.profiles(t), Egress: host.Egress{Extra: o.EgressExtra, Alias: o.EgressAlias},
		CacheDir: wasmbuild.CompilationCacheDir(t),
	})
	if err != nil {
		t.Fatalf("sdktest: loading %s: %v", path, err)
	}
	t.Cleanup(p.Close)
	return &wasmHost{p: p}
}

type wasmHost struct{ p *host.Plugin }

func (h *wasmHost) Manifest() abi.Manifest { return h.p.Manifest() }
func (h *wasmHost) Webhook(profile string, req abi.WebhookRequest) (*abi.WebhookResult, error) {
	return h.p.Webhook(context.Background(), profile, req)
}
func (h *wasmHost) Poll(profile string, wait time.Duration) (*abi.PollResult, error) {
	return h.p.Poll(context.Background(), profile, wait)
}
func (h *wasmHost) Send(profile string, msg abi.OutboundMessage) (*abi.SendResult, error) {
	return h.p.Send(context.Background(), profile, msg)
}
func (h *wasmHost) Tick(profile string, now time.Time) (*abi.TickResult, error) {
	return h.p.Tick(context.Background(), profile, now)
}
func (h *wasmHost) Jobs(profile string, req abi.JobsRequest) (*abi.JobsResult, error) {
	return h.p.Jobs(context.Background(), profile, req)
}

// Native runs the plugin registered in this test binary (the plugin's own package) in-process.
// Only one native host can be active at a time in a process: the SDK's transport is global.
func Native(t testing.TB, o Options) Host {
	t.Helper()
	nativeMu.Lock()
	t.Cleanup(nativeMu.Unlock)
	h := &nativeHost{env: o.env(t), profiles: o.profiles(t)}
	out, err := sdk.Handle(abi.ExportDescribe, nil)
	if err != nil {
		t.Fatalf("sdktest: describe: %v", err)
	}
	if err := json.Unmarshal(out, &h.manifest); err != nil {
		t.Fatalf("sdktest: describe: %v", err)
	}
	h.egress = host.Egress{Extra: o.EgressExtra, Alias: o.EgressAlias}
	sdk.UseTransport(h)
	t.Cleanup(func() { sdk.UseTransport(nil) })
	return h
}

var nativeMu sync.Mutex

func (h *wasmHost) Fetch(profile string, att abi.Attachment, maxBytes int64) (*abi.FetchResult, error) {
	return h.p.Fetch(context.Background(), profile, att, maxBytes)
}

type nativeHost struct {
	env      *host.Env
	manifest abi.Manifest
	egress   host.Egress // granted beyond the manifest's
	profiles map[string]json.RawMessage

	mu      sync.Mutex
	profile string // the profile of the call in progress
	export  string // the export of the call in progress
}

func (h *nativeHost) Manifest() abi.Manifest { return h.manifest }

// HostCall answers the plugin's host-function calls with the host's implementations, bound to
// the profile of the call in progress, as the Wasm runtime does.
func (h *nativeHost) HostCall(fn string, req []byte) []byte {
	return h.env.HostCall(context.Background(), h.manifest, h.egress, h.profile, h.export, fn, req)
}

// call runs export natively with the profile's configuration, one call at a time (as one Wasm
// instance would).
func call[Res any](h *nativeHost, profile, export string, build func(abi.Call) any) (*Res, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cfg, ok := h.profiles[profile]
	if !ok {
		return nil, abi.Errorf(abi.CodeNotFound, "no profile %q configured", profile)
	}
	in, err := json.Marshal(build(abi.Call{Profile: profile, Config: cfg}))
	if err != nil {
		return nil, err
	}
	h.profile, h.export = profile, export
	defer func() { h.profile, h.export = "", "" }()
	out, err := sdk.Handle(export, in)
	if err != nil {
		return nil, err
	}
	res := new(Res)
	return res, json.Unmarshal(out, res)
}

func (h *nativeHost) Webhook(profile string, req abi.WebhookRequest) (*abi.WebhookResult, error) {
	return call[abi.WebhookResult](h, profile, abi.ExportWebhook, func(c abi.Call) any { req.Call = c; return req })
}
func (h *nativeHost) Poll(profile string, wait time.Duration) (*abi.PollResult, error) {
	return call[abi.PollResult](h, profile, abi.ExportPoll, func(c abi.Call) any {
		return abi.PollRequest{Call: c, WaitMs: wait.Milliseconds()}
	})
}
func (h *nativeHost) Send(profile string, msg abi.OutboundMessage) (*abi.SendResult, error) {
	return call[abi.SendResult](h, profile, abi.ExportSend, func(c abi.Call) any { return abi.SendRequest{Call: c, Message: msg} })
}
func (h *nativeHost) Tick(profile string, now time.Time) (*abi.TickResult, error) {
	return call[abi.TickResult](h, profile, abi.ExportTick, func(c abi.Call) any {
		return abi.TickRequest{Call: c, UnixMs: now.UnixMilli()}
	})
}
func (h *nativeHost) Jobs(profile string, req abi.JobsRequest) (*abi.JobsResult, error) {
	return call[abi.JobsResult](h, profile, abi.ExportJobs, func(c abi.Call) any { req.Call = c; return req })
}
func (h *nativeHost) Fetch(profile string, att abi.Attachment, maxBytes int64) (*abi.FetchResult, error) {
	att.Data = nil
	res, err := call[abi.FetchResult](h, profile, abi.ExportFetch, func(c abi.Call) any {
		return abi.FetchRequest{Call: c, Attachment: att, MaxBytes: maxBytes}
	})
	if err == nil && int64(len(res.Data)) > maxBytes {
		return nil, abi.Errorf(abi.CodeTooLarge, "fetch returned %d bytes; the limit is %d", len(res.Data), maxBytes)
	}
	return res, err
}
