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
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/sdk"
)

// Host is a plugin under test, whichever way it runs.
type Host interface {
	Manifest() abi.Manifest
	Webhook(profile string, req abi.WebhookRequest) (*abi.WebhookResult, error)
	Poll(profile string, wait time.Duration) (*abi.PollResult, error)
	Send(profile string, msg abi.OutboundMessage) (*abi.SendResult, error)
	Tick(profile string, now time.Time) (*abi.TickResult, error)
	Jobs(profile string, req abi.JobsRequest) (*abi.JobsResult, error)
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
type State struct{ kv *kv.Store }

// NewState returns an empty State, removed when the test ends.
func NewState(t testing.TB) *State {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "sdktest.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	kvs, err := kv.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return &State{kv: kvs}
}

// Caller is who made a host-function call: the plugin (by manifest name), its kind and platform,
// and the profile of the call in progress.
type Caller struct {
	Plugin, Kind, Platform, Profile string
}

// Sessions answers the session host functions. The source's platform and profile are already
// the caller's own.
type Sessions interface {
	Resolve(ctx context.Context, c Caller, src abi.Source) (abi.SessionRef, error)
	Observe(ctx context.Context, c Caller, req abi.ObserveRequest) (abi.SessionRef, error)
	Redact(ctx context.Context, c Caller, src abi.Source) (bool, error)
	Seed(ctx context.Context, c Caller, req abi.SeedRequest) (abi.SessionRef, error)
}

// Dispatcher answers hermes_dispatch.
type Dispatcher interface {
	Dispatch(ctx context.Context, c Caller, ev abi.InboundEvent) (abi.DispatchReply, error)
}

// Sender answers hermes_send (scheduler plugins).
type Sender interface {
	HostSend(ctx context.Context, c Caller, req abi.HostSendRequest) (abi.HostSendReply, error)
}

// Agents answers hermes_agent (scheduler plugins).
type Agents interface {
	AgentTurn(ctx context.Context, c Caller, req abi.AgentRequest) (abi.AgentReply, error)
}

func (o Options) env(t testing.TB) *plugin.Env {
	st := o.State
	if st == nil {
		st = NewState(t)
	}
	eg := egress.NewClient(egress.Limits{})
	t.Cleanup(eg.Close)
	env := &plugin.Env{KV: st.kv, Egress: eg, Now: o.Now, Logger: o.Logger}
	if o.Sessions != nil {
		env.Sessions = sessions{o.Sessions}
	}
	if o.Dispatcher != nil {
		env.Dispatcher = dispatcher{o.Dispatcher}
	}
	if o.Sender != nil {
		env.Sender = sender{o.Sender}
	}
	if o.Agents != nil {
		env.Agents = agents{o.Agents}
	}
	return env
}

func caller(c plugin.Caller) Caller {
	return Caller{Plugin: c.Plugin, Kind: c.Kind, Platform: c.Platform, Profile: c.Profile}
}

// sessions, dispatcher and sender adapt the public interfaces to the runtime's.
type sessions struct{ s Sessions }

func (a sessions) Resolve(ctx context.Context, c plugin.Caller, src abi.Source) (abi.SessionRef, error) {
	return a.s.Resolve(ctx, caller(c), src)
}
func (a sessions) Observe(ctx context.Context, c plugin.Caller, req abi.ObserveRequest) (abi.SessionRef, error) {
	return a.s.Observe(ctx, caller(c), req)
}
func (a sessions) Redact(ctx context.Context, c plugin.Caller, src abi.Source) (bool, error) {
	return a.s.Redact(ctx, caller(c), src)
}
func (a sessions) Seed(ctx context.Context, c plugin.Caller, req abi.SeedRequest) (abi.SessionRef, error) {
	return a.s.Seed(ctx, caller(c), req)
}

type dispatcher struct{ d Dispatcher }

func (a dispatcher) Dispatch(ctx context.Context, c plugin.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	return a.d.Dispatch(ctx, caller(c), ev)
}

type sender struct{ s Sender }

func (a sender) HostSend(ctx context.Context, c plugin.Caller, req abi.HostSendRequest) (abi.HostSendReply, error) {
	return a.s.HostSend(ctx, caller(c), req)
}

type agents struct{ a Agents }

func (a agents) AgentTurn(ctx context.Context, c plugin.Caller, req abi.AgentRequest) (abi.AgentReply, error) {
	return a.a.AgentTurn(ctx, caller(c), req)
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

// Wasm loads the .wasm at path through the production runtime.
func Wasm(t testing.TB, path string, o Options) Host {
	t.Helper()
	env := o.env(t)
	rt, p, err := plugin.LoadFile(context.Background(), path, plugin.FileOptions{
		Profiles: o.profiles(t), Env: env, EgressExtra: o.EgressExtra, EgressAlias: o.EgressAlias,
	})
	if err != nil {
		t.Fatalf("sdktest: loading %s: %v", path, err)
	}
	t.Cleanup(rt.Close)
	return &wasmHost{p: p}
}

type wasmHost struct{ p *plugin.Plugin }

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
	h.policy = egress.Policy{Manifest: h.manifest.Egress, Scopes: h.manifest.EgressScopes, Extra: o.EgressExtra, Alias: o.EgressAlias}
	sdk.UseTransport(h)
	t.Cleanup(func() { sdk.UseTransport(nil) })
	return h
}

var nativeMu sync.Mutex

type nativeHost struct {
	env      *plugin.Env
	manifest abi.Manifest
	policy   egress.Policy
	profiles map[string]json.RawMessage

	mu      sync.Mutex
	profile string // the profile of the call in progress
	export  string // the export of the call in progress
}

func (h *nativeHost) Manifest() abi.Manifest { return h.manifest }

// HostCall answers the plugin's host-function calls with the host's implementations, bound to
// the profile of the call in progress, as the Wasm runtime does.
func (h *nativeHost) HostCall(fn string, req []byte) []byte {
	c := plugin.Caller{Plugin: h.manifest.Name, Kind: h.manifest.Kind, Platform: h.manifest.Platform, Profile: h.profile,
		Export: h.export, Egress: h.policy}
	out, _ := h.env.Invoke(context.Background(), c, fn, req)
	return out
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
