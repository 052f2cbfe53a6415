package egress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/hermes-host/hermes-host/abi"
)

// Owner identifies who a WebSocket connection belongs to: a plugin and a profile. Connections
// outlive plugin instances, so any instance serving that plugin and profile can use them.
type Owner struct {
	Plugin, Profile string
}

// wsRegistry holds the open connections. mu guards conns; each conn guards its own state.
type wsRegistry struct {
	c     *Client
	mu    sync.Mutex
	conns map[string]*wsConn
	next  atomic.Uint64
}

type wsConn struct {
	url    *url.URL // as opened: sends are checked against its host's scopes
	id     string
	owner  Owner
	conn   *websocket.Conn
	frames chan abi.WSFrame // filled by the reader goroutine
	done   chan struct{}    // closed when the reader stops
	// stop is closed when the host closes the connection: a reader blocked on a full frames
	// queue gives up its frames and returns instead of waiting forever.
	stop     chan struct{}
	stopOnce sync.Once
	// set by the reader before closing done:
	closeCode   int
	closeReason string
	sendMu      sync.Mutex // coder/websocket allows one writer at a time
}

func newWSRegistry(c *Client) *wsRegistry {
	return &wsRegistry{c: c, conns: map[string]*wsConn{}}
}

// WSOpen dials a WebSocket for owner under policy pol.
func (c *Client) WSOpen(ctx context.Context, owner Owner, pol Policy, export string, req *abi.WSOpenRequest) (string, error) {
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") {
		return "", abi.Errorf(abi.CodeBadRequest, "egress: not a ws(s) URL (%s)", safeOrigin(req.URL))
	}
	if err := pol.Check(u, Use{Export: export, Method: http.MethodGet}); err != nil {
		return "", &abi.Error{Code: abi.CodeDenied, Message: err.Error()}
	}
	r := c.ws
	if r.count(owner) >= c.limits.MaxConns {
		return "", abi.Errorf(abi.CodeTooLarge, "egress: %d WebSocket connections already open for %s/%s", c.limits.MaxConns, owner.Plugin, owner.Profile)
	}
	dctx, cancel := context.WithTimeout(dialContext(ctx, pol, u), c.timeout(req.TimeoutMs))
	defer cancel()
	client := c.httpClient(pol, func(r *http.Request) error {
		*r = *r.WithContext(dialContext(r.Context(), pol, r.URL))
		return pol.Check(r.URL, Use{Export: export, Method: r.Method})
	})
	conn, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{
		HTTPClient:   client,
		HTTPHeader:   http.Header(req.Headers),
		Subprotocols: req.Subprotocols,
	})
	if err != nil {
		if e := refused(err); e != nil {
			return "", e
		}
		status := ""
		if resp != nil {
			status = fmt.Sprintf(" (HTTP %d)", resp.StatusCode)
		}
		return "", abi.Errorf(abi.CodeIO, "egress: WebSocket %s%s: %s", Origin(u), status, scrub(err))
	}
	conn.SetReadLimit(c.limits.MaxFrame)
	wc := &wsConn{
		url:    u,
		id:     "ws_" + strconv.FormatUint(r.next.Add(1), 10),
		owner:  owner,
		conn:   conn,
		frames: make(chan abi.WSFrame, c.limits.QueuedFrames),
		done:   make(chan struct{}),
		stop:   make(chan struct{}),
	}
	r.mu.Lock()
	r.conns[wc.id] = wc
	r.mu.Unlock()
	go wc.read()
	return wc.id, nil
}

func (r *wsRegistry) count(owner Owner) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.conns {
		if c.owner == owner {
			n++
		}
	}
	return n
}

// read pumps frames into the buffer until the connection ends. A full buffer blocks the reader,
// which is the backpressure the peer sees.
func (wc *wsConn) read() {
	defer close(wc.done)
	for {
		typ, data, err := wc.conn.Read(context.Background())
		if err != nil {
			wc.closeCode = int(websocket.CloseStatus(err))
			if wc.closeCode < 0 {
				wc.closeCode = int(websocket.StatusAbnormalClosure)
			}
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				wc.closeReason = ce.Reason
			} else {
				wc.closeReason = err.Error()
			}
			return
		}
		select {
		case wc.frames <- abi.WSFrame{Binary: typ == websocket.MessageBinary, Data: data}:
		case <-wc.stop:
			return
		}
	}
}

// close ends the connection from the host's side: the reader is released first, then the
// close handshake runs.
func (wc *wsConn) close(code websocket.StatusCode, reason string) {
	wc.stopOnce.Do(func() { close(wc.stop) })
	wc.conn.Close(code, reason)
}

func (r *wsRegistry) get(owner Owner, id string) (*wsConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wc := r.conns[id]
	if wc == nil || wc.owner != owner {
		// Another owner's connection is reported exactly like a missing one.
		return nil, abi.Errorf(abi.CodeNotFound, "no WebSocket connection %q", id)
	}
	return wc, nil
}

func (r *wsRegistry) forget(id string) {
	r.mu.Lock()
	delete(r.conns, id)
	r.mu.Unlock()
}

// WSSend writes one frame, if export may send on the connection's host (its scopes). What the
// frame says is the plugin's: the host does not read frames.
func (c *Client) WSSend(ctx context.Context, owner Owner, pol Policy, export string, req *abi.WSSendRequest) error {
	wc, err := c.ws.get(owner, req.Conn)
	if err != nil {
		return err
	}
	if err := pol.Check(wc.url, Use{Export: export}); err != nil {
		return &abi.Error{Code: abi.CodeDenied, Message: err.Error()}
	}
	if int64(len(req.Frame.Data)) > c.limits.MaxFrame {
		return abi.Errorf(abi.CodeTooLarge, "egress: frame of %d bytes exceeds %d", len(req.Frame.Data), c.limits.MaxFrame)
	}
	typ := websocket.MessageText
	if req.Frame.Binary {
		typ = websocket.MessageBinary
	}
	ctx, cancel := context.WithTimeout(ctx, c.limits.Timeout)
	defer cancel()
	wc.sendMu.Lock()
	defer wc.sendMu.Unlock()
	if err := wc.conn.Write(ctx, typ, req.Frame.Data); err != nil {
		return abi.Errorf(abi.CodeClosed, "egress: WebSocket %s: %v", req.Conn, err)
	}
	return nil
}

// WSRecv waits up to the requested timeout for at least one frame, then returns what is queued
// (up to MaxFrames). When the peer has closed and the queue is drained, it reports Closed and
// forgets the connection.
func (c *Client) WSRecv(ctx context.Context, owner Owner, req *abi.WSRecvRequest) (*abi.WSRecvReply, error) {
	wc, err := c.ws.get(owner, req.Conn)
	if err != nil {
		return nil, err
	}
	max := req.MaxFrames
	if max <= 0 {
		max = 1
	}
	max = min(max, c.limits.MaxRecvFrames)
	out := &abi.WSRecvReply{}
	timer := time.NewTimer(c.timeout(req.TimeoutMs))
	defer timer.Stop()
	select {
	case f := <-wc.frames:
		out.Frames = append(out.Frames, f)
	case <-wc.done:
	case <-timer.C:
		return out, nil
	case <-ctx.Done():
		return nil, abi.Errorf(abi.CodeTimeout, "egress: receive on %s cancelled: %v", req.Conn, ctx.Err())
	}
drain:
	for len(out.Frames) < max {
		select {
		case f := <-wc.frames:
			out.Frames = append(out.Frames, f)
		default:
			break drain
		}
	}
	if len(out.Frames) < max {
		select {
		case <-wc.done:
			// The reader has stopped; frames it queued before stopping are still delivered first.
			if len(wc.frames) == 0 {
				out.Closed, out.CloseCode, out.CloseReason = true, wc.closeCode, wc.closeReason
				c.ws.forget(wc.id)
			}
		default:
		}
	}
	return out, nil
}

// WSClose closes a connection and forgets it.
func (c *Client) WSClose(owner Owner, req *abi.WSCloseRequest) error {
	wc, err := c.ws.get(owner, req.Conn)
	if err != nil {
		return err
	}
	code := websocket.StatusNormalClosure
	if req.Code >= 1000 && req.Code < 5000 {
		code = websocket.StatusCode(req.Code)
	}
	c.ws.forget(wc.id)
	wc.close(code, req.Reason)
	return nil
}

// CloseOwner closes every connection of owner (when its plugin is unloaded).
func (c *Client) CloseOwner(plugin string) {
	c.ws.mu.Lock()
	var victims []*wsConn
	for id, wc := range c.ws.conns {
		if wc.owner.Plugin == plugin {
			victims = append(victims, wc)
			delete(c.ws.conns, id)
		}
	}
	c.ws.mu.Unlock()
	for _, wc := range victims {
		wc.close(websocket.StatusGoingAway, "plugin unloaded")
	}
}

func (r *wsRegistry) closeAll() {
	r.mu.Lock()
	victims := r.conns
	r.conns = map[string]*wsConn{}
	r.mu.Unlock()
	for _, wc := range victims {
		wc.close(websocket.StatusGoingAway, "host shutting down")
	}
}
