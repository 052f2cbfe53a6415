package agenttest

import (
	"io"
	"net/http"
	"sync"
)

// Transport serves requests in-process, without a socket: the handler runs in a goroutine and
// its body streams through a pipe. Use it inside a testing/synctest bubble, where a goroutine
// blocked on the network would keep fake time from advancing.
func (s *Server) Transport() http.RoundTripper { return transport{s} }

type transport struct{ s *Server }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	rw := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer pw.Close()
		defer rw.writeHeader(http.StatusOK) // a handler that wrote nothing answers 200
		if req.Body == nil {
			req.Body = http.NoBody
		}
		t.s.ServeHTTP(rw, req)
	}()
	select {
	case <-rw.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: http.StatusText(rw.status), StatusCode: rw.status, Header: rw.sent,
		Body: pr, Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, ContentLength: -1}, nil
}

// pipeWriter is an http.ResponseWriter over a pipe.
type pipeWriter struct {
	header http.Header
	sent   http.Header
	status int
	once   sync.Once
	ready  chan struct{}
	pw     *io.PipeWriter
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) writeHeader(status int) {
	w.once.Do(func() {
		w.status, w.sent = status, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) WriteHeader(status int) { w.writeHeader(status) }

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.writeHeader(http.StatusOK)
	return w.pw.Write(b)
}

func (w *pipeWriter) Flush() {}
