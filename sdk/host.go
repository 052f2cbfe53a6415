package sdk

import (
	"encoding/json"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk/internal/wire"
)

// Transport carries one host-function call: the function name and its JSON request in, the
// JSON abi.Reply out. In Wasm it is the imported host function; natively a test host supplies it.
type Transport interface {
	HostCall(fn string, req []byte) []byte
}

var transport Transport = wasmTransport{}

// UseTransport replaces the way host functions are reached (nil restores the default). Only
// in-process test hosts (package sdktest) call it; plugins never do.
func UseTransport(t Transport) {
	if t == nil {
		t = wasmTransport{}
	}
	transport = t
}

// call sends req to host function fn and decodes the result into res (a pointer, or nil).
// The requests and replies of the calls made on every message (an HTTP request, a dispatch),
// and any reply without a result, go through package wire; the rest, and any reply wire leaves
// alone, through encoding/json.
func call(fn string, req, res any) error {
	in, ok := wire.Marshal(req)
	if !ok {
		var err error
		if in, err = json.Marshal(req); err != nil {
			return abi.Errorf(abi.CodeBadRequest, "%s: encode request: %v", fn, err)
		}
	}
	out := transport.HostCall(fn, in)
	if ok, handled := wire.UnmarshalReply(out, res); handled {
		if !ok {
			return abi.Errorf(abi.CodeInternal, "%s: host reported failure without an error", fn)
		}
		return nil
	}
	// abi.Reply with the result decoded straight into res: one pass over the reply, where
	// decoding abi.Reply and then its json.RawMessage result scanned and copied the result twice.
	r := struct {
		OK     bool       `json:"ok"`
		Result any        `json:"result,omitempty"`
		Error  *abi.Error `json:"error,omitempty"`
	}{Result: res}
	if res == nil {
		r.Result = new(json.RawMessage)
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return abi.Errorf(abi.CodeInternal, "%s: malformed reply from host: %v", fn, err)
	}
	if !r.OK {
		if r.Error == nil {
			return abi.Errorf(abi.CodeInternal, "%s: host reported failure without an error", fn)
		}
		return r.Error
	}
	return nil
}

// Log writes a structured log line, attributed by the host to this plugin and profile.
func (c *Context) Log(level, msg string, attrs ...string) {
	req := abi.LogRequest{Level: level, Message: msg}
	if len(attrs) > 1 {
		req.Attrs = make(map[string]string, len(attrs)/2)
		for i := 0; i+1 < len(attrs); i += 2 {
			req.Attrs[attrs[i]] = attrs[i+1]
		}
	}
	_ = call(abi.HostLog, req, nil) // logging never fails a handler
}

// Now is the host's clock, the authoritative time for a plugin: use it, not time.Now, for
// anything a test of the host may need to move (WASI's clock is the real wall clock).
func (c *Context) Now() (time.Time, error) {
	var r abi.ClockReply
	if err := call(abi.HostClock, struct{}{}, &r); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(r.UnixMs), nil
}

// KVGet reads a key of this plugin's durable store for the current profile.
func (c *Context) KVGet(key string) (value []byte, found bool, err error) {
	var r abi.KVGetReply
	if err := call(abi.HostKVGet, abi.KVGetRequest{Key: key}, &r); err != nil {
		return nil, false, err
	}
	return r.Value, r.Found, nil
}

// KVSet writes a key durably: when KVSet returns nil, the value survives a host crash.
func (c *Context) KVSet(key string, value []byte) error {
	return call(abi.HostKVSet, abi.KVSetRequest{Key: key, Value: value}, nil)
}

// KVDelete removes a key.
func (c *Context) KVDelete(key string) error {
	return call(abi.HostKVDelete, abi.KVDeleteRequest{Key: key}, nil)
}

// HTTP performs an egress request to a host the manifest declares. Its timeout defaults to the
// time the call has left (less a margin), and a longer one is shortened to it, so a slow
// platform produces a timeout the plugin can report rather than a call the host must stop.
func (c *Context) HTTP(req *abi.HTTPRequest) (*abi.HTTPResponse, error) {
	if b, ok := c.budget(); ok && (req.TimeoutMs <= 0 || time.Duration(req.TimeoutMs)*time.Millisecond > b) {
		r := *req
		r.TimeoutMs = max(b.Milliseconds(), 1)
		req = &r
	}
	var r abi.HTTPResponse
	if err := call(abi.HostHTTP, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// WSOpen opens a host-owned WebSocket connection and returns its id.
func (c *Context) WSOpen(req *abi.WSOpenRequest) (string, error) {
	var r abi.WSOpenReply
	if err := call(abi.HostWSOpen, req, &r); err != nil {
		return "", err
	}
	return r.Conn, nil
}

// WSSend sends one frame on a connection.
func (c *Context) WSSend(conn string, f abi.WSFrame) error {
	return call(abi.HostWSSend, abi.WSSendRequest{Conn: conn, Frame: f}, nil)
}

// WSRecv waits up to timeout for frames on a connection.
func (c *Context) WSRecv(conn string, timeout time.Duration, maxFrames int) (*abi.WSRecvReply, error) {
	if b, ok := c.budget(); ok && timeout > b {
		timeout = b // within the call's deadline, less a margin
	}
	var r abi.WSRecvReply
	err := call(abi.HostWSRecv, abi.WSRecvRequest{Conn: conn, TimeoutMs: timeout.Milliseconds(), MaxFrames: maxFrames}, &r)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// WSClose closes a connection.
func (c *Context) WSClose(conn string, code int, reason string) error {
	return call(abi.HostWSClose, abi.WSCloseRequest{Conn: conn, Code: code, Reason: reason}, nil)
}

// ResolveSession gets or creates the session for src (platform and profile are forced by the
// host to this plugin's own).
func (c *Context) ResolveSession(src abi.Source) (*abi.SessionRef, error) {
	var r abi.SessionRef
	if err := call(abi.HostSessionResolve, abi.SessionRequest{Source: src}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Observe appends text to src's transcript without starting a turn.
func (c *Context) Observe(src abi.Source, role, text string) (*abi.SessionRef, error) {
	var r abi.SessionRef
	if err := call(abi.HostSessionObserve, abi.ObserveRequest{Source: src, Role: role, Text: text}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Redact removes the recalled message src.MessageID from its transcript.
func (c *Context) Redact(src abi.Source) (bool, error) {
	var r abi.RedactReply
	if err := call(abi.HostSessionRedact, abi.RedactRequest{Source: src}, &r); err != nil {
		return false, err
	}
	return r.Redacted, nil
}

// Seed creates src's session if needed and appends text (if any) in the same critical section.
func (c *Context) Seed(src abi.Source, role, text string) (*abi.SessionRef, error) {
	var r abi.SessionRef
	if err := call(abi.HostSessionSeed, abi.SeedRequest{Source: src, Role: role, Text: text}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Dispatch hands one inbound event to the host for a turn (deduplicated by ev.ID).
func (c *Context) Dispatch(ev abi.InboundEvent) (*abi.DispatchReply, error) {
	var r abi.DispatchReply
	if err := call(abi.HostDispatch, &abi.DispatchRequest{Event: ev}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// SendTo asks the host to deliver text into a chat (scheduler plugins).
func (c *Context) SendTo(req *abi.HostSendRequest) (*abi.HostSendReply, error) {
	var r abi.HostSendReply
	if err := call(abi.HostSend, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Agent asks the host for one agent turn with req.Prompt (scheduler plugins) and returns the
// answer. The turn has no history and no tools, and must finish within the calling export's
// deadline.
func (c *Context) Agent(req *abi.AgentRequest) (string, error) {
	var r abi.AgentReply
	if err := call(abi.HostAgent, req, &r); err != nil {
		return "", err
	}
	return r.Text, nil
}
