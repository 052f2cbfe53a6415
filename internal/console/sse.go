package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// keepAlive is how often an idle event stream sends a comment, so a dead connection is noticed.
const keepAlive = 15 * time.Second

// stream is one Server-Sent Events answer.
type stream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startStream answers r with an event stream. The server's write deadline, if any, is lifted:
// a stream lasts as long as the page is open.
func startStream(w http.ResponseWriter) *stream {
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{}) // not every writer supports it; then streams end with the deadline and the browser reconnects
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, rc: rc}
	// The client reconnects after 2 s when the stream breaks.
	fmt.Fprint(w, "retry: 2000\n\n")
	rc.Flush()
	return s
}

// send writes one event whose data is v as JSON; id, if not empty, is the event's id (the
// browser sends the last one back as Last-Event-ID when it reconnects).
func (s *stream) send(event, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if id != "" {
		fmt.Fprintf(s.w, "id: %s\n", id)
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// ping writes a comment.
func (s *stream) ping() error {
	if _, err := fmt.Fprint(s.w, ": ping\n\n"); err != nil {
		return err
	}
	return s.rc.Flush()
}

// resumeFrom is where a stream starts: the Last-Event-ID the browser sends when it reconnects,
// else the ?after= the page was rendered with.
func resumeFrom(r *http.Request) int64 {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("after")
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return max(n, 0)
}
