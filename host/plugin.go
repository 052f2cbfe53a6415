package host

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Errors of calls into a plugin, for errors.Is. The error itself says more (the export, the
// reason, the guest's last words on standard error).
var (
	// ErrCrashed: the plugin's instance died during the call (it trapped, ran past its deadline
	// or out of memory) and was discarded; the next call gets a fresh one.
	ErrCrashed = errors.New("plugin instance crashed")
	// ErrDeadline: the crash was the call's deadline (the instance ran past it and was
	// stopped); such an error is ErrCrashed too.
	ErrDeadline = errors.New("plugin call ran past its deadline")
	// ErrFailed: the plugin crashed repeatedly and its breaker tripped; calls are refused. The
	// error also says which crash was the last (it is ErrCrashed too).
	ErrFailed = errors.New("plugin failed after repeated crashes")
)

// callError is the error of a call into a plugin: the runtime's, which it unwraps to (so
// abi.CodeOf and the abi error codes work on it), and ErrCrashed, ErrDeadline or ErrFailed
// where the runtime's is a crash, a crash at the deadline, or a tripped breaker.
type callError struct{ err error }

func (e callError) Error() string { return e.err.Error() }
func (e callError) Unwrap() error { return e.err }
func (e callError) Is(target error) bool {
	var crash *plugin.CrashError
	switch target {
	case ErrCrashed:
		return errors.Is(e.err, plugin.ErrCrashed)
	case ErrDeadline:
		return errors.As(e.err, &crash) && crash.Reason == "deadline"
	case ErrFailed:
		return errors.Is(e.err, plugin.ErrFailed)
	}
	return false
}

func callErr(err error) error {
	if err == nil {
		return nil
	}
	return callError{err}
}

// result passes a call's result on with its error made a callError.
func result[T any](v T, err error) (T, error) { return v, callErr(err) }

// PluginInfo describes a loaded plugin, as `hermes-host plugins inspect` prints it and the
// admin API's /api/plugins serves it.
type PluginInfo struct {
	Name      string              `json:"name"`
	File      string              `json:"file"`
	SHA256    string              `json:"sha256"`
	ABI       string              `json:"abi"`
	Manifest  abi.Manifest        `json:"manifest"`
	State     string              `json:"state"` // active or failed
	LastError string              `json:"last_error,omitempty"`
	Instances int                 `json:"instances"`
	Loaded    time.Time           `json:"loaded"`
	Profiles  map[string][]string `json:"profiles"` // profile → problems (empty: serving)
	// Status is what the plugin last reported about each profile from poll, if anything.
	Status map[string]abi.ProfileStatus `json:"status,omitempty"`
	// Warnings found at load (unscoped egress to a chat platform's API).
	Warnings []string `json:"warnings,omitempty"`
	// EgressDenied counts egress calls the policy refused; LastDenied is the last refusal.
	EgressDenied int64  `json:"egress_denied,omitempty"`
	LastDenied   string `json:"last_denied,omitempty"`
	// Crashes counts the crashes of the loaded version (before the breaker trips as after);
	// LastCrash is the latest, at LastCrashAt.
	Crashes     int        `json:"crashes,omitempty"`
	LastCrash   string     `json:"last_crash,omitempty"`
	LastCrashAt *time.Time `json:"last_crash_at,omitempty"`
}

func infoOf(i plugin.Info) PluginInfo {
	return PluginInfo{Name: i.Name, File: i.File, SHA256: i.SHA256, ABI: i.ABI, Manifest: i.Manifest, State: i.State,
		LastError: i.LastError, Instances: i.Instances, Loaded: i.Loaded, Profiles: i.Profiles, Status: i.Status,
		Warnings: i.Warnings, EgressDenied: i.EgressDenied, LastDenied: i.LastDenied,
		Crashes: i.Crashes, LastCrash: i.LastCrash, LastCrashAt: i.LastCrashAt}
}

// Rejection is a plugin file that could not be loaded, and why.
type Rejection struct {
	Path  string    `json:"path"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

func rejections(rs []plugin.Rejection) []Rejection {
	var out []Rejection
	for _, r := range rs {
		out = append(out, Rejection{Path: r.Path, Error: r.Error, At: r.At})
	}
	return out
}

// Egress grants a plugin hosts beyond its manifest's egress, as an operator's configuration
// does (egress_extra, egress_alias). Everything else stays denied.
type Egress struct {
	// Extra are host patterns granted beyond the manifest's (a loopback fake's 127.0.0.1).
	Extra []string
	// Alias maps an address (host:port, a loopback fake's) to the declared host it stands in
	// for: the host's egress scopes then apply to the address.
	Alias map[string]string
}

// PluginOptions configure LoadPlugin.
type PluginOptions struct {
	// Env is the host environment the plugin's host functions act on; nil: a bare one (no kv,
	// no egress, the session and send services unavailable), enough to describe and validate.
	Env *Env
	// Profiles maps each profile the plugin is configured for to its configuration (a JSON
	// object); every one is checked against the manifest's schema and the plugin's configure.
	Profiles map[string]json.RawMessage
	Egress   Egress
	// CallTimeout bounds each call into the plugin; 0: the host's default (10 s).
	CallTimeout time.Duration
	// NoBreaker keeps a plugin that crashes repeatedly callable (each call a fresh instance),
	// where a serving host would mark it failed: the conformance suite reports every crash.
	NoBreaker bool
	// CacheDir is the compilation cache; "": hermes-host's directory in the user cache.
	CacheDir string
}

// Plugin is one plugin file loaded through the production runtime, as a serving host loads
// it: validated (ABI marker, exports, manifest), described, and configured for each profile.
// Its calls run on a bounded pool of instances with the host's memory caps and deadlines.
type Plugin struct {
	rt *plugin.Runtime
	p  *plugin.Plugin
}

// LoadPlugin loads the plugin file at path into a runtime of its own, or returns why the file
// was rejected. Close releases it.
func LoadPlugin(ctx context.Context, path string, opt PluginOptions) (*Plugin, error) {
	fo := plugin.FileOptions{Profiles: opt.Profiles, EgressExtra: opt.Egress.Extra, EgressAlias: opt.Egress.Alias,
		Limits: plugin.Limits{CallTimeout: opt.CallTimeout}, CacheDir: opt.CacheDir}
	if opt.NoBreaker {
		fo.Limits.BreakerCrashes = 1 << 30
	}
	if opt.Env != nil {
		fo.Env = opt.Env.env
	}
	rt, p, err := plugin.LoadFile(ctx, path, fo)
	if err != nil {
		return nil, err
	}
	return &Plugin{rt: rt, p: p}, nil
}

// Inspect validates the plugin file at path as a serving host would load it (without
// profiles) and describes it: `hermes-host plugins inspect`.
func Inspect(ctx context.Context, path string) (PluginInfo, error) {
	p, err := LoadPlugin(ctx, path, PluginOptions{})
	if err != nil {
		return PluginInfo{}, err
	}
	defer p.Close()
	info := p.Info()
	info.File = path // the path given, not the runtime's working copy
	return info, nil
}

// Close unloads the plugin and releases its runtime.
func (p *Plugin) Close() { p.rt.Close() }

// Manifest is what the plugin's describe answered.
func (p *Plugin) Manifest() abi.Manifest { return p.p.Manifest() }

// Info describes the plugin: state, instances, each profile's problems.
func (p *Plugin) Info() PluginInfo { return infoOf(p.p.Info()) }

// Active reports whether the plugin serves: loaded, and its breaker not tripped.
func (p *Plugin) Active() bool { return p.p.Active() }

// MaxInput is the most bytes one export call may take as input (larger is refused unread).
func (p *Plugin) MaxInput() int { return p.p.Limits().MaxInput }

// Call calls export with a raw JSON input, as the ABI defines it, for profile (whose
// configuration the runtime does not add: input is passed as it is).
func (p *Plugin) Call(ctx context.Context, profile, export string, input []byte) ([]byte, error) {
	return result(p.p.Call(ctx, profile, export, input))
}

// Webhook calls the webhook export for profile.
func (p *Plugin) Webhook(ctx context.Context, profile string, req abi.WebhookRequest) (*abi.WebhookResult, error) {
	return result(p.p.Webhook(ctx, profile, req))
}

// Poll calls the poll export for profile, letting it wait up to wait for events.
func (p *Plugin) Poll(ctx context.Context, profile string, wait time.Duration) (*abi.PollResult, error) {
	return result(p.p.Poll(ctx, profile, wait))
}

// Send calls the send export for profile.
func (p *Plugin) Send(ctx context.Context, profile string, msg abi.OutboundMessage) (*abi.SendResult, error) {
	return result(p.p.Send(ctx, profile, msg))
}

// Fetch calls a platform plugin's fetch export for one attachment of profile, accepting at most
// maxBytes (capability "attachments", ABI 1.2).
func (p *Plugin) Fetch(ctx context.Context, profile string, att abi.Attachment, maxBytes int64) (*abi.FetchResult, error) {
	return result(p.p.Fetch(ctx, profile, att, maxBytes))
}

// Tick calls a scheduler plugin's tick export for profile at the time now.
func (p *Plugin) Tick(ctx context.Context, profile string, now time.Time) (*abi.TickResult, error) {
	return result(p.p.Tick(ctx, profile, now))
}

// Jobs calls a scheduler plugin's jobs export for profile.
func (p *Plugin) Jobs(ctx context.Context, profile string, req abi.JobsRequest) (*abi.JobsResult, error) {
	return result(p.p.Jobs(ctx, profile, req))
}

// Caller is who made a host-function call: the plugin (by manifest name), its kind and
// platform, the profile of the call in progress, and the export it serves. The host derives it
// from the call in progress; a plugin cannot choose it.
type Caller struct {
	Plugin, Kind, Platform, Profile, Export string
}

func callerOf(c plugin.Caller) Caller {
	return Caller{Plugin: c.Plugin, Kind: c.Kind, Platform: c.Platform, Profile: c.Profile, Export: c.Export}
}

// Sessions answers the session host functions (hermes_session_*) of platform plugins. The
// source's platform and profile have already been forced to the caller's own.
type Sessions interface {
	Resolve(ctx context.Context, c Caller, src abi.Source) (abi.SessionRef, error)
	Observe(ctx context.Context, c Caller, req abi.ObserveRequest) (abi.SessionRef, error)
	Redact(ctx context.Context, c Caller, src abi.Source) (bool, error)
	Seed(ctx context.Context, c Caller, req abi.SeedRequest) (abi.SessionRef, error)
}

// Dispatcher answers hermes_dispatch: an inbound event a platform plugin hands over.
type Dispatcher interface {
	Dispatch(ctx context.Context, c Caller, ev abi.InboundEvent) (abi.DispatchReply, error)
}

// Sender answers hermes_send: a scheduler plugin's message into a chat.
type Sender interface {
	HostSend(ctx context.Context, c Caller, req abi.HostSendRequest) (abi.HostSendReply, error)
}

// AgentTurns answers hermes_agent: one agent turn for a scheduler plugin (no history, no tools).
type AgentTurns interface {
	AgentTurn(ctx context.Context, c Caller, req abi.AgentRequest) (abi.AgentReply, error)
}

// State is a plugin's durable host-side state: its kv store (one database file in a
// directory). Envs given the same State share it, so a test can stop one plugin and load
// another as a restart would.
type State struct {
	db *sql.DB
	kv *kv.Store
}

// OpenState opens the State kept in dir (created if missing).
func OpenState(dir string) (*State, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	db, err := store.Open(filepath.Join(dir, "state.db"), store.Options{})
	if err != nil {
		return nil, err
	}
	kvs, err := kv.Open(context.Background(), db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &State{db: db, kv: kvs}, nil
}

// Close closes the State's database.
func (s *State) Close() error { return s.db.Close() }

// EnvOptions configure NewEnv. A nil service makes its host functions answer "unavailable", as
// a host without that service would.
type EnvOptions struct {
	// State is the plugins' kv state; nil: a new one in a temporary directory, removed by Close.
	State      *State
	Sessions   Sessions
	Dispatcher Dispatcher
	Sender     Sender
	Agents     AgentTurns
	// Now is the clock plugins read (hermes_clock); nil: the real one.
	Now func() time.Time
	// Logger receives the plugins' hermes_log lines (with plugin and profile); nil: discarded.
	Logger *slog.Logger
	// Egressed, if not nil, is told of every HTTP request a plugin made through hermes_http,
	// allowed or refused (err): the conformance suite checks which export posts what.
	Egressed func(c Caller, method string, u *url.URL, err error)
}

// Env is a host environment for plugins loaded with LoadPlugin: their kv state, egress (deny by
// default, through the host's own client, which owns their WebSocket connections) and the
// services of EnvOptions. A plugin loaded again into the same Env keeps its kv state and its
// connections, as a serving host's plugins do across a hot reload.
type Env struct {
	env     *plugin.Env
	egress  *egress.Client
	release func() // the State and directory NewEnv made itself
}

// NewEnv returns an Env; Close releases it.
func NewEnv(opt EnvOptions) (*Env, error) {
	e := &Env{release: func() {}}
	st := opt.State
	if st == nil {
		dir, err := os.MkdirTemp("", "hermes-env-")
		if err != nil {
			return nil, err
		}
		if st, err = OpenState(dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		e.release = func() { st.Close(); os.RemoveAll(dir) }
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e.egress = egress.NewClient(egress.Limits{})
	e.env = &plugin.Env{KV: st.kv, Egress: e.egress, Now: opt.Now, Logger: log}
	if opt.Sessions != nil {
		e.env.Sessions = sessions{opt.Sessions}
	}
	if opt.Dispatcher != nil {
		e.env.Dispatcher = dispatcher{opt.Dispatcher}
	}
	if opt.Sender != nil {
		e.env.Sender = sender{opt.Sender}
	}
	if opt.Agents != nil {
		e.env.Agents = agentTurns{opt.Agents}
	}
	if f := opt.Egressed; f != nil {
		e.env.Egressed = func(c plugin.Caller, method string, u *url.URL, err error) { f(callerOf(c), method, u, err) }
	}
	return e, nil
}

// Close closes the Env's connections, and the State it made itself.
func (e *Env) Close() {
	e.egress.Close()
	e.release()
}

// HostCall answers one host-function call (fn, with its JSON request) made by a plugin with
// manifest m, granted egress, during a call of export for profile, and returns the JSON reply
// the ABI defines. It is what a Wasm instance's host functions run: sdktest answers a plugin's
// natively running handlers with it, so egress policy, kv and profile binding behave exactly as
// they do in the host.
func (e *Env) HostCall(ctx context.Context, m abi.Manifest, granted Egress, profile, export, fn string, req []byte) []byte {
	c := plugin.Caller{Plugin: m.Name, Kind: m.Kind, Platform: m.Platform, Profile: profile, Export: export,
		Egress: egress.Policy{Manifest: m.Egress, Scopes: m.EgressScopes, Extra: granted.Extra, Alias: granted.Alias}}
	out, _ := e.env.Invoke(ctx, c, fn, req)
	return out
}

// sessions, dispatcher, sender and agentTurns adapt the public services to the runtime's.
type sessions struct{ s Sessions }

func (a sessions) Resolve(ctx context.Context, c plugin.Caller, src abi.Source) (abi.SessionRef, error) {
	return a.s.Resolve(ctx, callerOf(c), src)
}
func (a sessions) Observe(ctx context.Context, c plugin.Caller, req abi.ObserveRequest) (abi.SessionRef, error) {
	return a.s.Observe(ctx, callerOf(c), req)
}
func (a sessions) Redact(ctx context.Context, c plugin.Caller, src abi.Source) (bool, error) {
	return a.s.Redact(ctx, callerOf(c), src)
}
func (a sessions) Seed(ctx context.Context, c plugin.Caller, req abi.SeedRequest) (abi.SessionRef, error) {
	return a.s.Seed(ctx, callerOf(c), req)
}

type dispatcher struct{ d Dispatcher }

func (a dispatcher) Dispatch(ctx context.Context, c plugin.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	return a.d.Dispatch(ctx, callerOf(c), ev)
}

type sender struct{ s Sender }

func (a sender) HostSend(ctx context.Context, c plugin.Caller, req abi.HostSendRequest) (abi.HostSendReply, error) {
	return a.s.HostSend(ctx, callerOf(c), req)
}

type agentTurns struct{ a AgentTurns }

func (a agentTurns) AgentTurn(ctx context.Context, c plugin.Caller, req abi.AgentRequest) (abi.AgentReply, error) {
	return a.a.AgentTurn(ctx, callerOf(c), req)
}
