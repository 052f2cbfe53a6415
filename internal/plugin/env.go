package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"runtime/debug"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/kv"
)

// Caller is who is calling a host function: the plugin, the profile its current call serves,
// and what the plugin may do. The host derives it from the export call in progress; a plugin
// cannot choose it.
type Caller struct {
	Plugin   string
	Kind     string // abi.KindPlatform or abi.KindScheduler
	Platform string
	Profile  string // empty during describe: profile-bound functions are then refused
	Export   string // the export being served: egress scopes are checked against it
	Egress   egress.Policy
}

// Sessions is the session boundary as plugins see it. Every method runs inside the key's
// boundary lock; Source.Platform and Source.Profile have already been forced to the caller's.
type Sessions interface {
	Resolve(ctx context.Context, c Caller, src abi.Source) (abi.SessionRef, error)
	Observe(ctx context.Context, c Caller, req abi.ObserveRequest) (abi.SessionRef, error)
	Redact(ctx context.Context, c Caller, src abi.Source) (bool, error)
	Seed(ctx context.Context, c Caller, req abi.SeedRequest) (abi.SessionRef, error)
}

// Dispatcher accepts inbound events for turns.
type Dispatcher interface {
	Dispatch(ctx context.Context, c Caller, ev abi.InboundEvent) (abi.DispatchReply, error)
}

// Sender delivers a scheduler plugin's message into a chat through the delivery ledger.
type Sender interface {
	HostSend(ctx context.Context, c Caller, req abi.HostSendRequest) (abi.HostSendReply, error)
}

// Agents runs one agent turn for a scheduler plugin (hermes_agent): no history, no tools.
type Agents interface {
	AgentTurn(ctx context.Context, c Caller, req abi.AgentRequest) (abi.AgentReply, error)
}

// Env is everything host functions act on. A nil service makes its functions answer
// abi.CodeUnavailable, so a host can run with only the parts it needs.
type Env struct {
	Logger     *slog.Logger
	KV         *kv.Store
	Egress     *egress.Client
	Sessions   Sessions
	Dispatcher Dispatcher
	Sender     Sender
	Agents     Agents
	Now        func() time.Time // default time.Now
	// MaxRequest caps a host function's JSON request read from guest memory. Default 8 MiB.
	MaxRequest int
	// Denied, if set, is told of every egress call the policy refused (the runtime counts and
	// shows them to the operator).
	Denied func(c Caller, fn string, err error)
	// Egressed, if set, is told of every HTTP request a plugin made through hermes_http, allowed
	// or not (the conformance suite checks which export posts what).
	Egressed func(c Caller, method string, u *url.URL, err error)
}

// egressDone reports an egress call's outcome to the hooks.
func (e *Env) egressDone(c *Caller, fn string, err error) {
	if err != nil && abi.CodeOf(err) == abi.CodeDenied && e.Denied != nil {
		e.Denied(*c, fn, err)
	}
}

// hostFunc is the Go side of one host function: a decoded request in, a result or error out.
type hostFunc func(ctx context.Context, c *Caller, req []byte) (any, error)

// Invoke runs host function fn for caller c with the JSON request req and returns the JSON
// abi.Reply. It never panics: a panic in the implementation becomes an abi.CodeInternal reply,
// and panicked reports it so the runtime can discard the instance that triggered it. Both the
// Wasm runtime and in-process test hosts (sdktest) call Invoke, so natively tested plugins see
// exactly the host's behaviour.
func (e *Env) Invoke(ctx context.Context, c Caller, fn string, req []byte) (reply []byte, panicked error) {
	var res any
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				panicked = fmt.Errorf("host function %s panicked: %v", fn, r)
				e.logger().Error("host function panicked", "fn", fn, "plugin", c.Plugin, "panic", r, "stack", string(debug.Stack()))
				err = &abi.Error{Code: abi.CodeInternal, Message: panicked.Error()}
			}
		}()
		f := e.table(fn)
		if f == nil {
			err = abi.Errorf(abi.CodeUnsupported, "unknown host function %q", fn)
			return
		}
		res, err = f(ctx, &c, req)
	}()
	var r abi.Reply
	if err != nil {
		r.Error = abi.AsError(err)
	} else {
		r.OK = true
		if res != nil {
			b, merr := json.Marshal(res)
			if merr != nil {
				r = abi.Reply{Error: abi.Errorf(abi.CodeInternal, "%s: encode result: %v", fn, merr)}
			} else {
				r.Result = b
			}
		}
	}
	out, _ := json.Marshal(r)
	return out, panicked
}

func (e *Env) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.Default()
	}
	return e.Logger
}

func (e *Env) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

func (e *Env) maxRequest() int {
	if e.MaxRequest <= 0 {
		return 8 << 20
	}
	return e.MaxRequest
}

// decodeReq parses a host-function request strictly enough to give the plugin a useful error.
func decodeReq[T any](fn string, b []byte) (*T, error) {
	v := new(T)
	if len(b) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, abi.Errorf(abi.CodeBadRequest, "%s: malformed request: %v", fn, err)
	}
	return v, nil
}

func needProfile(fn string, c *Caller) error {
	if c.Profile == "" {
		return abi.Errorf(abi.CodeDenied, "%s needs a profile; it is not available during describe", fn)
	}
	return nil
}

func needKind(fn string, c *Caller, kind string) error {
	if c.Kind != kind {
		return abi.Errorf(abi.CodeDenied, "%s is for %s plugins; %s is a %s plugin", fn, kind, c.Plugin, c.Kind)
	}
	return nil
}

func unavailable(fn string) error {
	return abi.Errorf(abi.CodeUnavailable, "%s: this host runs without that service", fn)
}

// force pins a plugin-supplied source to the caller's own platform and profile, so a plugin can
// never address another platform's or profile's sessions.
func force(c *Caller, s abi.Source) abi.Source {
	s.Platform, s.Profile = c.Platform, c.Profile
	return s
}

func (e *Env) table(fn string) hostFunc {
	switch fn {
	case abi.HostLog:
		return e.hostLog
	case abi.HostClock:
		return func(context.Context, *Caller, []byte) (any, error) {
			return abi.ClockReply{UnixMs: e.now().UnixMilli()}, nil
		}
	case abi.HostKVGet:
		return e.hostKVGet
	case abi.HostKVSet:
		return e.hostKVSet
	case abi.HostKVDelete:
		return e.hostKVDelete
	case abi.HostHTTP:
		return e.hostHTTP
	case abi.HostWSOpen:
		return e.hostWSOpen
	case abi.HostWSSend:
		return e.hostWSSend
	case abi.HostWSRecv:
		return e.hostWSRecv
	case abi.HostWSClose:
		return e.hostWSClose
	case abi.HostSessionResolve:
		return e.hostSessionResolve
	case abi.HostSessionObserve:
		return e.hostSessionObserve
	case abi.HostSessionRedact:
		return e.hostSessionRedact
	case abi.HostSessionSeed:
		return e.hostSessionSeed
	case abi.HostDispatch:
		return e.hostDispatch
	case abi.HostSend:
		return e.hostSend
	case abi.HostAgent:
		return e.hostAgent
	}
	return nil
}

const maxLogMessage = 8 << 10

func (e *Env) hostLog(ctx context.Context, c *Caller, b []byte) (any, error) {
	req, err := decodeReq[abi.LogRequest](abi.HostLog, b)
	if err != nil {
		return nil, err
	}
	level, known := slog.LevelInfo, true
	switch req.Level {
	case abi.LevelDebug:
		level = slog.LevelDebug
	case abi.LevelInfo, "":
	case abi.LevelWarn:
		level = slog.LevelWarn
	case abi.LevelError:
		level = slog.LevelError
	default:
		known = false // logged at info all the same, and the reply says so (SPEC 5.1)
	}
	msg := req.Message
	if len(msg) > maxLogMessage {
		msg = msg[:maxLogMessage] + "…(cut)"
	}
	attrs := []any{"plugin", c.Plugin, "profile", c.Profile}
	n := 0
	for k, v := range req.Attrs {
		if n++; n > 32 {
			break
		}
		attrs = append(attrs, slog.String("p."+k, v))
	}
	if !known {
		attrs = append(attrs, "unknown_level", req.Level)
	}
	e.logger().Log(ctx, level, msg, attrs...)
	if !known {
		return nil, abi.Errorf(abi.CodeBadRequest, "unknown log level %q (debug, info, warn or error): logged at info", req.Level)
	}
	return nil, nil
}

func (e *Env) hostKVGet(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := needProfile(abi.HostKVGet, c); err != nil {
		return nil, err
	}
	if e.KV == nil {
		return nil, unavailable(abi.HostKVGet)
	}
	req, err := decodeReq[abi.KVGetRequest](abi.HostKVGet, b)
	if err != nil {
		return nil, err
	}
	v, found, err := e.KV.Get(ctx, c.Plugin, c.Profile, req.Key)
	if err != nil {
		return nil, err
	}
	return abi.KVGetReply{Found: found, Value: v}, nil
}

func (e *Env) hostKVSet(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := needProfile(abi.HostKVSet, c); err != nil {
		return nil, err
	}
	if e.KV == nil {
		return nil, unavailable(abi.HostKVSet)
	}
	req, err := decodeReq[abi.KVSetRequest](abi.HostKVSet, b)
	if err != nil {
		return nil, err
	}
	return nil, e.KV.Set(ctx, c.Plugin, c.Profile, req.Key, req.Value)
}

func (e *Env) hostKVDelete(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := needProfile(abi.HostKVDelete, c); err != nil {
		return nil, err
	}
	if e.KV == nil {
		return nil, unavailable(abi.HostKVDelete)
	}
	req, err := decodeReq[abi.KVDeleteRequest](abi.HostKVDelete, b)
	if err != nil {
		return nil, err
	}
	return nil, e.KV.Delete(ctx, c.Plugin, c.Profile, req.Key)
}

func (e *Env) hostHTTP(ctx context.Context, c *Caller, b []byte) (any, error) {
	if e.Egress == nil {
		return nil, unavailable(abi.HostHTTP)
	}
	req, err := decodeReq[abi.HTTPRequest](abi.HostHTTP, b)
	if err != nil {
		return nil, err
	}
	res, err := e.Egress.HTTP(ctx, c.Egress, c.Export, req)
	e.egressDone(c, abi.HostHTTP, err)
	if e.Egressed != nil {
		if u, perr := url.Parse(req.URL); perr == nil {
			method := req.Method
			if method == "" {
				method = "GET"
			}
			e.Egressed(*c, method, u, err)
		}
	}
	return res, err
}

func (e *Env) owner(c *Caller) egress.Owner {
	return egress.Owner{Plugin: c.Plugin, Profile: c.Profile}
}

func (e *Env) hostWSOpen(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := needProfile(abi.HostWSOpen, c); err != nil {
		return nil, err
	}
	if e.Egress == nil {
		return nil, unavailable(abi.HostWSOpen)
	}
	req, err := decodeReq[abi.WSOpenRequest](abi.HostWSOpen, b)
	if err != nil {
		return nil, err
	}
	// The dial outlives the call that asked for it, so it is not bound to the call's context.
	id, err := e.Egress.WSOpen(context.WithoutCancel(ctx), e.owner(c), c.Egress, c.Export, req)
	e.egressDone(c, abi.HostWSOpen, err)
	if err != nil {
		return nil, err
	}
	return abi.WSOpenReply{Conn: id}, nil
}

func (e *Env) hostWSSend(ctx context.Context, c *Caller, b []byte) (any, error) {
	if e.Egress == nil {
		return nil, unavailable(abi.HostWSSend)
	}
	req, err := decodeReq[abi.WSSendRequest](abi.HostWSSend, b)
	if err != nil {
		return nil, err
	}
	err = e.Egress.WSSend(ctx, e.owner(c), c.Egress, c.Export, req)
	e.egressDone(c, abi.HostWSSend, err)
	return nil, err
}

func (e *Env) hostWSRecv(ctx context.Context, c *Caller, b []byte) (any, error) {
	if e.Egress == nil {
		return nil, unavailable(abi.HostWSRecv)
	}
	req, err := decodeReq[abi.WSRecvRequest](abi.HostWSRecv, b)
	if err != nil {
		return nil, err
	}
	return e.Egress.WSRecv(ctx, e.owner(c), req)
}

func (e *Env) hostWSClose(ctx context.Context, c *Caller, b []byte) (any, error) {
	if e.Egress == nil {
		return nil, unavailable(abi.HostWSClose)
	}
	req, err := decodeReq[abi.WSCloseRequest](abi.HostWSClose, b)
	if err != nil {
		return nil, err
	}
	return nil, e.Egress.WSClose(e.owner(c), req)
}

// sessionGate checks what every session and dispatch function requires.
func (e *Env) sessionGate(fn string, c *Caller) error {
	if err := needProfile(fn, c); err != nil {
		return err
	}
	if err := needKind(fn, c, abi.KindPlatform); err != nil {
		return err
	}
	if e.Sessions == nil {
		return unavailable(fn)
	}
	return nil
}

func (e *Env) hostSessionResolve(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := e.sessionGate(abi.HostSessionResolve, c); err != nil {
		return nil, err
	}
	req, err := decodeReq[abi.SessionRequest](abi.HostSessionResolve, b)
	if err != nil {
		return nil, err
	}
	return e.Sessions.Resolve(ctx, *c, force(c, req.Source))
}

func (e *Env) hostSessionObserve(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := e.sessionGate(abi.HostSessionObserve, c); err != nil {
		return nil, err
	}
	req, err := decodeReq[abi.ObserveRequest](abi.HostSessionObserve, b)
	if err != nil {
		return nil, err
	}
	req.Source = force(c, req.Source)
	return e.Sessions.Observe(ctx, *c, *req)
}

func (e *Env) hostSessionRedact(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := e.sessionGate(abi.HostSessionRedact, c); err != nil {
		return nil, err
	}
	req, err := decodeReq[abi.RedactRequest](abi.HostSessionRedact, b)
	if err != nil {
		return nil, err
	}
	ok, err := e.Sessions.Redact(ctx, *c, force(c, req.Source))
	if err != nil {
		return nil, err
	}
	return abi.RedactReply{Redacted: ok}, nil
}

func (e *Env) hostSessionSeed(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := e.sessionGate(abi.HostSessionSeed, c); err != nil {
		return nil, err
	}
	req, err := decodeReq[abi.SeedRequest](abi.HostSessionSeed, b)
	if err != nil {
		return nil, err
	}
	req.Source = force(c, req.Source)
	return e.Sessions.Seed(ctx, *c, *req)
}

func (e *Env) hostDispatch(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := needProfile(abi.HostDispatch, c); err != nil {
		return nil, err
	}
	if err := needKind(abi.HostDispatch, c, abi.KindPlatform); err != nil {
		return nil, err
	}
	if e.Dispatcher == nil {
		return nil, unavailable(abi.HostDispatch)
	}
	req, err := decodeReq[abi.DispatchRequest](abi.HostDispatch, b)
	if err != nil {
		return nil, err
	}
	req.Event.Source = force(c, req.Event.Source)
	return e.Dispatcher.Dispatch(ctx, *c, req.Event)
}

func (e *Env) hostSend(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := needProfile(abi.HostSend, c); err != nil {
		return nil, err
	}
	if err := needKind(abi.HostSend, c, abi.KindScheduler); err != nil {
		return nil, err
	}
	if e.Sender == nil {
		return nil, unavailable(abi.HostSend)
	}
	req, err := decodeReq[abi.HostSendRequest](abi.HostSend, b)
	if err != nil {
		return nil, err
	}
	// A scheduler may address any platform, but only within the profile it serves.
	req.Target.Profile = c.Profile
	if req.Target.Platform == "" {
		return nil, abi.Errorf(abi.CodeBadRequest, "%s: target.platform is required", abi.HostSend)
	}
	return e.Sender.HostSend(ctx, *c, *req)
}

func (e *Env) hostAgent(ctx context.Context, c *Caller, b []byte) (any, error) {
	if err := needProfile(abi.HostAgent, c); err != nil {
		return nil, err
	}
	if err := needKind(abi.HostAgent, c, abi.KindScheduler); err != nil {
		return nil, err
	}
	if e.Agents == nil {
		return nil, unavailable(abi.HostAgent)
	}
	req, err := decodeReq[abi.AgentRequest](abi.HostAgent, b)
	if err != nil {
		return nil, err
	}
	if req.Prompt == "" {
		return nil, abi.Errorf(abi.CodeBadRequest, "%s: prompt is required", abi.HostAgent)
	}
	if req.Source != nil {
		if req.Source.Platform == "" {
			return nil, abi.Errorf(abi.CodeBadRequest, "%s: source.platform is required", abi.HostAgent)
		}
		src := *req.Source
		src.Profile = c.Profile
		req.Source = &src
	}
	return e.Agents.AgentTurn(ctx, *c, *req)
}
