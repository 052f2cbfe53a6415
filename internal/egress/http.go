package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
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
	http   *http.Client
	ws     *wsRegistry
}

// NewClient returns a Client with the given limits (zero fields take defaults).
func NewClient(l Limits) *Client {
	l.defaults()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // plugins reach exactly the host they name
	c := &Client{limits: l, http: &http.Client{Transport: tr}}
	c.ws = newWSRegistry(c)
	return c
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
func (c *Client) HTTP(ctx context.Context, pol Policy, req *abi.HTTPRequest) (*abi.HTTPResponse, error) {
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, abi.Errorf(abi.CodeBadRequest, "egress: %q is not an http(s) URL", req.URL)
	}
	if err := pol.Check(u); err != nil {
		return nil, &abi.Error{Code: abi.CodeDenied, Message: err.Error()}
	}
	if int64(len(req.Body)) > c.limits.MaxRequest {
		return nil, abi.Errorf(abi.CodeTooLarge, "egress: request body of %d bytes exceeds %d", len(req.Body), c.limits.MaxRequest)
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout(req.TimeoutMs))
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(req.Body))
	if err != nil {
		return nil, abi.Errorf(abi.CodeBadRequest, "egress: %v", err)
	}
	for k, vs := range req.Headers {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	client := *c.http
	client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return pol.Check(r.URL)
	}
	var wrote atomic.Bool
	hr = hr.WithContext(httptrace.WithClientTrace(hr.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	}))
	resp, err := client.Do(hr)
	if err != nil {
		var denied *DeniedError
		if errors.As(err, &denied) {
			return nil, &abi.Error{Code: abi.CodeDenied, Message: "redirect refused: " + denied.Error()}
		}
		if wrote.Load() {
			// The request went out; whether the other side acted on it is unknown.
			return nil, abi.Errorf(abi.CodeUncertain, "egress: %s %s: sent, but no answer: %v", method, u.Redacted(), err)
		}
		if ctx.Err() == context.DeadlineExceeded {
			return nil, abi.Errorf(abi.CodeTimeout, "egress: %s %s: no connection in %v", method, u.Redacted(), c.timeout(req.TimeoutMs))
		}
		return nil, abi.Errorf(abi.CodeIO, "egress: %s %s: %v", method, u.Redacted(), err)
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
		return nil, abi.Errorf(abi.CodeUncertain, "egress: %s %s: answered %d, but the body was cut: %v", method, u.Redacted(), resp.StatusCode, err)
	}
	if int64(len(body)) > max {
		return nil, abi.Errorf(abi.CodeTooLarge, "egress: response from %s exceeds the cap of %d bytes (cut)", u.Host, max)
	}
	return &abi.HTTPResponse{Status: resp.StatusCode, Headers: resp.Header, Body: body}, nil
}

// String describes the limits, for logs.
func (l Limits) String() string {
	return fmt.Sprintf("timeout=%v max_timeout=%v max_response=%d", l.Timeout, l.MaxTimeout, l.MaxResponse)
}
