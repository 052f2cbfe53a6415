// Package sdk is the Go guest SDK for hermes-host plugins.
//
// A plugin is a main package that registers its handlers in init and has an empty main:
//
//	func init() {
//		sdk.Register(sdk.Plugin{
//			Manifest: abi.Manifest{Name: "echo", Kind: abi.KindPlatform, ...},
//			Send:     send,
//		})
//	}
//	func main() {}
//
// Build it with the standard toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o echo.wasm .
//
// The SDK provides the exports (describe, configure, webhook, poll, send, tick, jobs and the ABI
// version marker), decodes requests, encodes replies and maps errors, so a plugin only writes
// handlers. Handlers reach the world only through the host functions wrapped by Context.
//
// The same plugin code also runs natively, against an in-process test host (package sdktest),
// so plugin logic can be unit-tested with go test before it is built to Wasm.
package sdk

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk/internal/wire"
)

// Plugin is what a plugin registers: its manifest and the handlers for the exports it supports.
// A nil handler answers its export with an abi.CodeUnsupported error.
type Plugin struct {
	Manifest abi.Manifest
	// Configure validates a profile's configuration. Nil accepts any configuration that
	// matches Manifest.ConfigSchema (which the host checks itself).
	Configure func(c *Context) ([]string, error)
	Webhook   func(c *Context, req *abi.WebhookRequest) (*abi.WebhookResult, error)
	Poll      func(c *Context, req *abi.PollRequest) (*abi.PollResult, error)
	Send      func(c *Context, msg *abi.OutboundMessage) (*abi.SendResult, error)
	Tick      func(c *Context, req *abi.TickRequest) (*abi.TickResult, error)
	// Jobs lists and changes a scheduler's jobs (capability "jobs").
	Jobs func(c *Context, req *abi.JobsRequest) (*abi.JobsResult, error)
	// Fetch returns an attachment's bytes (capability "attachments", ABI 1.2).
	Fetch func(c *Context, req *abi.FetchRequest) (*abi.FetchResult, error)
}

var registered *Plugin

// Register installs p as this module's plugin. Call it once, from init.
func Register(p Plugin) {
	if registered != nil {
		panic("sdk: Register called twice")
	}
	registered = &p
}

// Handle runs export with the JSON request input and returns the JSON reply. The Wasm exports
// call it, and so do in-process test hosts. A panic in a handler is recovered and returned as
// an abi.CodeInternal error, so one bad message never kills the instance.
func Handle(export string, input []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &abi.Error{Code: abi.CodeInternal, Message: fmt.Sprintf("plugin panic in %s: %v\n%s", export, r, debug.Stack())}
			out = nil
		}
	}()
	p := registered
	if p == nil {
		return nil, abi.Errorf(abi.CodeInternal, "no plugin registered (call sdk.Register from init)")
	}
	switch export {
	case abi.ExportDescribe:
		return json.Marshal(p.Manifest)
	case abi.ExportConfigure:
		var req abi.ConfigureRequest
		c, err := decode(input, &req, &req.Call)
		if err != nil {
			return nil, err
		}
		res := abi.ConfigureResult{}
		if p.Configure != nil {
			problems, err := p.Configure(c)
			if err != nil {
				return nil, err
			}
			res.Problems = problems
		}
		return json.Marshal(res)
	case abi.ExportWebhook:
		if p.Webhook == nil {
			return nil, unsupported(export)
		}
		var req abi.WebhookRequest
		c, err := decode(input, &req, &req.Call)
		if err != nil {
			return nil, err
		}
		return reply(p.Webhook(c, &req))
	case abi.ExportPoll:
		if p.Poll == nil {
			return nil, unsupported(export)
		}
		var req abi.PollRequest
		c, err := decode(input, &req, &req.Call)
		if err != nil {
			return nil, err
		}
		return reply(p.Poll(c, &req))
	case abi.ExportSend:
		if p.Send == nil {
			return nil, unsupported(export)
		}
		var req abi.SendRequest
		c, err := decode(input, &req, &req.Call)
		if err != nil {
			return nil, err
		}
		if req.Message.ChatID == "" {
			return nil, abi.Errorf(abi.CodeBadRequest, "send: message.chat_id is required")
		}
		return reply(p.Send(c, &req.Message))
	case abi.ExportTick:
		if p.Tick == nil {
			return nil, unsupported(export)
		}
		var req abi.TickRequest
		c, err := decode(input, &req, &req.Call)
		if err != nil {
			return nil, err
		}
		return reply(p.Tick(c, &req))
	case abi.ExportJobs:
		if p.Jobs == nil {
			return nil, unsupported(export)
		}
		var req abi.JobsRequest
		c, err := decode(input, &req, &req.Call)
		if err != nil {
			return nil, err
		}
		return reply(p.Jobs(c, &req))
	case abi.ExportFetch:
		if p.Fetch == nil {
			return nil, unsupported(export)
		}
		var req abi.FetchRequest
		c, err := decode(input, &req, &req.Call)
		if err != nil {
			return nil, err
		}
		return reply(p.Fetch(c, &req))
	}
	return nil, abi.Errorf(abi.CodeUnsupported, "unknown export %q", export)
}

func unsupported(export string) error {
	return abi.Errorf(abi.CodeUnsupported, "this plugin does not implement %s", export)
}

// decode parses a request and builds the handler's Context from its Call part.
func decode(input []byte, req any, call *abi.Call) (*Context, error) {
	if len(input) == 0 {
		return nil, abi.Errorf(abi.CodeBadRequest, "empty request")
	}
	if !wire.Unmarshal(input, req) {
		if err := json.Unmarshal(input, req); err != nil {
			return nil, abi.Errorf(abi.CodeBadRequest, "malformed request: %v", err)
		}
	}
	if call.Profile == "" {
		return nil, abi.Errorf(abi.CodeBadRequest, "request has no profile")
	}
	c := &Context{Profile: call.Profile, Config: call.Config}
	if call.DeadlineMs > 0 {
		c.Deadline = time.Now().Add(time.Duration(call.DeadlineMs) * time.Millisecond)
	}
	return c, nil
}

func reply[T any](v *T, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	if v == nil {
		v = new(T)
	}
	if out, ok := wire.Marshal(v); ok {
		return out, nil
	}
	return json.Marshal(v)
}

// Context is what a handler receives: the profile it serves, that profile's configuration, and
// typed access to the host functions.
type Context struct {
	Profile string
	Config  json.RawMessage
	// Deadline is when the host stops this call (zero if the host did not say). The HTTP and
	// WebSocket helpers keep their waits inside it.
	Deadline time.Time
}

// budget is how long a wait started now may last: the time left before Deadline, less a
// margin to report the outcome (a tenth of it, at least 200 ms). ok is false when the host gave
// no deadline.
func (c *Context) budget() (d time.Duration, ok bool) {
	if c.Deadline.IsZero() {
		return 0, false
	}
	left := time.Until(c.Deadline)
	return max(left-max(left/10, 200*time.Millisecond), time.Millisecond), true
}

// DecodeConfig unmarshals the profile's configuration into v.
func (c *Context) DecodeConfig(v any) error {
	if len(c.Config) == 0 {
		return nil
	}
	if err := json.Unmarshal(c.Config, v); err != nil {
		return abi.Errorf(abi.CodeBadRequest, "config: %v", err)
	}
	return nil
}
