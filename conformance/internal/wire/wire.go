// Package wire holds what the platform fakes do to a connection when they lie: the one way to
// reset it, shared by slacktest, discordtest and matrixtest.
package wire

import (
	"net"
	"net/http"
)

// Reset closes the request's connection with a TCP RST (linger 0), as a platform that drops the
// connection after taking the request does; a writer that cannot be hijacked aborts the handler.
func Reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}
