package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// Limits bound every egress operation.
type Limits struct {
	Timeout       time.Duration // per request unless the plugin asks for less; default 30s
	MaxTimeout    time.Duration // the most a plugin may ask for (long polls); default 120s
	MaxRequest    int64         // request body cap; default 8 MiB
	MaxResponse   int64         // response body cap; default 8 MiB
	MaxFrame      int64         // WebSocket message cap; default 1 MiB
	MaxConns      int           // open WebSocket connections per plugin and profile; default 8
	QueuedFrames  int           // received frames buffered per connection; default 256
	MaxRecvFrames int           // frames returned by one receive; default 64
}

func (l *Limits) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&l.Timeout, 30*time.Second)
	set(&l.MaxTimeout, 120*time.Second)
	seti := func(d *int64, v int64) {
		if *d <= 0 {
			*d = v
		}
	}
	seti(&l.MaxRequest, 8<<20)
	seti(&l.MaxResponse, 8<<20)
	seti(&l.MaxFrame, 1<<20)
	if l.MaxConns <= 0 {
		l.MaxConns = 8
	}
	if l.QueuedFrames <= 0 {
		l.QueuedFrames = 256
	}
	if l.MaxRecvFrames <= 0 {
		l.MaxRecvFrames = 64
	}
}

// Client performs egress for all plugins. It is safe for concurrent use.
type Client struct {
	limits Limits
	ws     *wsRegistry

	// Connections are pooled per set of operator grants: a connection dialed under one
	// policy's internal-address grant is never reused by a request under another policy.
	mu         sync.Mutex
	transports map[string]*http.Transport
}

// NewClient returns a Client with the given limits (zero fields take defaults).
func NewClient(l Limits) *Client {
	l.defaults()
	c := &Client{limits: l, transports: map[string]*http.Transport{}}
	c.ws = newWSRegistry(c)
	return c
}

// policyKey is the context key of the policy a dial is made under.
type policyKey struct{}

// httpClient returns a client for requests under pol: its transport dials only addresses pol
// allows (checked after name resolution), and it follows at most 5 redirects, each allowed by
// check.
func (c *Client) httpClient(pol Policy, check func(*http.Request) error) *http.Client {
	key := strings.Join(pol.Extra, ",") + "|" + strings.Join(pol.Internal, ",")
	c.mu.Lock()
	tr := c.transports[key]
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil // plugins reach exactly the host they name
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
			ControlContext: func(ctx context.Context, network, address string, _ syscall.RawConn) error {
				pol, _ := ctx.Value(policyKey{}).(Policy)
				host, _ := ctx.Value(hostKey{}).(string)
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("egress: dialing %q: %w", address, err)
				}
				return pol.CheckAddr(host, ap.Addr())
			}}
		tr.DialContext = d.DialContext
		c.transports[key] = tr
	}
	c.mu.Unlock()
	return &http.Client{Transport: tr, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("egress: more than %d redirects", maxRedirects)
		}
		return check(r)
	}}
}

const maxRedirects = 5

// hostKey is the context key of the host name a dial resolves (for the error message).
type hostKey struct{}

// dialContext binds pol and the URL's host to ctx for the dial-time address check.
func dialContext(ctx context.Context, pol Policy, u *url.URL) context.Context {
	return context.WithValue(context.WithValue(ctx, policyKey{}, pol), hostKey{}, u.Hostname())
}

// scrub turns a network error into a message that names only scheme://host: the URL inside a
// *url.Error (the request's, or a redirect's) carries the path, and tokens live in paths.
func scrub(err error) string {
	msg := err.Error()
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ue, ok := e.(*url.Error); ok {
			if u, perr := url.Parse(ue.URL); perr == nil {
				msg = strings.ReplaceAll(msg, ue.URL, Origin(u))
			}
		}
	}
	return msg
}

// refused reports whether err is the policy refusing a dial or a redirect, as an abi error.
func refused(err error) *abi.Error {
	var internal *InternalError
	if errors.As(err, &internal) {
		return &abi.Error{Code: abi.CodeDenied, Message: internal.Error()}
	}
	var denied *DeniedError
	if errors.As(err, &denied) {
		return &abi.Error{Code: abi.CodeDenied, Message: "redirect refused: " + denied.Error()}
	}
	var scope *ScopeError
	if errors.As(err, &scope) {
		return &abi.Error{Code: abi.CodeDenied, Message: "redirect refused: " + scope.Error()}
	}
	return nil
}

// Close closes every WebSocket connection.
func (c *Client) Close() { c.ws.closeAll() }

func (c *Client) timeout(ms int64) time.Duration {
	d := c.limits.Timeout
	if ms > 0 {
		d = time.Duration(ms) * time.Millisecond
	}
	return min(d, c.limits.MaxTimeout)
}

// HTTP performs req for a plugin under policy pol. Redirects are followed only to allowed hosts.
// A response body over the cap (the smaller of the host's limit and req.MaxBytes) is an
// abi.CodeTooLarge error: the plugin never sees a silently truncated body.
func (c *Client) HTTP(ctx context.Context, pol Policy, export string, req *abi.HTTPRequest) (*abi.HTTPResponse, error) {
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, abi.Errorf(abi.CodeBadRequest, "egress: not an http(s) URL (%s)", safeOrigin(req.URL))
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if err := pol.Check(u, Use{Export: export, Method: method}); err != nil {
		return nil, &abi.Error{Code: abi.CodeDenied, Message: err.Error()}
	}
	if int64(len(req.Body)) > c.limits.MaxRequest {
		return nil, abi.Errorf(abi.CodeTooLarge, "egress: request body of %d bytes exceeds %d", len(req.Body), c.limits.MaxRequest)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout(req.TimeoutMs))
	defer cancel()
	hr, err := http.NewRequestWithContext(dialContext(ctx, pol, u), method, u.String(), bytes.NewReader(req.Body))
	if err != nil {
		return nil, abi.Errorf(abi.CodeBadRequest, "egress: %s %s: %s", method, Origin(u), scrub(err))
	}
	for k, vs := range req.Headers {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	client := c.httpClient(pol, func(r *http.Request) error {
		// A redirect is checked like the request itself, and dialed under the same policy.
		*r = *r.WithContext(dialContext(r.Context(), pol, r.URL))
		return pol.Check(r.URL, Use{Export: export, Method: r.Method})
	})
	var wrote atomic.Bool
	hr = hr.WithContext(httptrace.WithClientTrace(hr.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	}))
	resp, err := client.Do(hr)
	if err != nil {
		if e := refused(err); e != nil {
			return nil, e
		}
		if wrote.Load() {
			// The request went out; whether the other side acted on it is unknown.
			return nil, abi.Errorf(abi.CodeUncertain, "egress: %s %s: sent, but no answer: %s", method, Origin(u), scrub(err))
		}
		if ctx.Err() == context.DeadlineExceeded {
			return nil, abi.Errorf(abi.CodeTimeout, "egress: %s %s: no connection in %v", method, Origin(u), c.timeout(req.TimeoutMs))
		}
		return nil, abi.Errorf(abi.CodeIO, "egress: %s %s: %s", method, Origin(u), scrub(err))
	}
	defer resp.Body.Close()
	max := c.limits.MaxResponse
	if req.MaxBytes > 0 && req.MaxBytes < max {
		max = req.MaxBytes
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		// The other side answered (the status line arrived), so it acted on the request; only
		// the rest of its answer was lost. That is not a safe-to-retry io error.
		return nil, abi.Errorf(abi.CodeUncertain, "egress: %s %s: answered %d, but the body was cut: %s", method, Origin(u), resp.StatusCode, scrub(err))
	}
	if int64(len(body)) > max {
		return nil, abi.Errorf(abi.CodeTooLarge, "egress: response from %s exceeds the cap of %d bytes (cut)", Origin(u), max)
	}
	return &abi.HTTPResponse{Status: resp.StatusCode, Headers: resp.Header, Body: body}, nil
}

// safeOrigin quotes the origin of a URL that failed to parse as wanted, or nothing.
func safeOrigin(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return Origin(u)
	}
	return "unparseable URL"
}

// String describes the limits, for logs.
func (l Limits) String() string {
	return fmt.Sprintf("timeout=%v max_timeout=%v max_response=%d", l.Timeout, l.MaxTimeout, l.MaxResponse)
}
