package response

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
)

// TrackedWriter wraps the ResponseWriter of an admitted request: it counts response bytes (for
// response_bytes) and intercepts Hijack, so that the in-flight slot of a hijacked connection
// (a WebSocket, say) is released when that connection is closed rather than when the handler
// returns. Flush, Push and the rest are reached through Unwrap (http.ResponseController), as
// with Caddy's own wrappers. Pooled: nothing may keep it after the handler returns.
type TrackedWriter struct {
	http.ResponseWriter
	ticket   connlimit.Handle
	n        int64 // response body bytes written
	status   int   // the final status written (0 before WriteHeader)
	hijacked bool
	out      *Outcome // the root outcome of the request's placeholders, for later rate_limit handlers

	start   time.Time     // when timing started (TimeHeaders); zero: not timed
	headers time.Duration // from start to the final status (0 before it, or not timed)
}

var writerPool = sync.Pool{New: func() any { return new(TrackedWriter) }}

// Track wraps w for a request holding t (nil: no slot to track) whose placeholders
// are out's (nil: none).
func Track(w http.ResponseWriter, t *connlimit.Ticket, out *Outcome) *TrackedWriter {
	tw := writerPool.Get().(*TrackedWriter)
	tw.ResponseWriter = w
	if t != nil {
		tw.ticket = t.Handle()
	}
	if out != nil {
		tw.out = out.root
	}
	return tw
}

// Done gives tw back to the pool: nothing may use it afterwards.
func (tw *TrackedWriter) Done() {
	*tw = TrackedWriter{}
	writerPool.Put(tw)
}

// TimeHeaders starts timing the response at start: WriteHeader of the final status records
// the time to response headers (HeaderLatency). One clock read there, nothing else.
func (tw *TrackedWriter) TimeHeaders(start time.Time) { tw.start = start }

// HeaderLatency is the time from TimeHeaders to the final status (0 if either is missing).
func (tw *TrackedWriter) HeaderLatency() time.Duration { return tw.headers }

// Status is the final status written (0 before WriteHeader).
func (tw *TrackedWriter) Status() int { return tw.status }

// Written is the number of response body bytes written.
func (tw *TrackedWriter) Written() int64 { return tw.n }

// Hijacked reports whether the connection was hijacked: its slot is released when it closes.
func (tw *TrackedWriter) Hijacked() bool { return tw.hijacked }

// WriteHeader records the final status (1xx responses are not final).
func (tw *TrackedWriter) WriteHeader(code int) {
	if tw.status == 0 && code >= 200 {
		tw.status = code
		if !tw.start.IsZero() {
			tw.headers = time.Since(tw.start)
		}
	}
	tw.ResponseWriter.WriteHeader(code)
}

// Write counts the bytes written.
func (tw *TrackedWriter) Write(p []byte) (int, error) {
	n, err := tw.ResponseWriter.Write(p)
	tw.n += int64(n)
	tw.ticket.Touch() // a long download is activity, not a leak
	return n, err
}

// Unwrap is the wrapped writer (http.ResponseController reaches Flush and the rest through it).
func (tw *TrackedWriter) Unwrap() http.ResponseWriter { return tw.ResponseWriter }

// ReadFrom counts the bytes copied (the file server and the proxy use it), with the wrapped
// writer's ReadFrom when it has one (sendfile).
func (tw *TrackedWriter) ReadFrom(r io.Reader) (n int64, err error) {
	if rf, ok := tw.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(tw.ResponseWriter, r)
	}
	tw.n += n
	tw.ticket.Touch()
	return n, err
}

// Hijack hands the connection over; from then on the slot is released when it is closed.
func (tw *TrackedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(tw.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	tw.hijacked = true
	rc := &releasingConn{Conn: conn, ticket: tw.ticket}
	if _, ok := conn.(halfCloser); ok {
		return halfClosingConn{rc}, brw, nil
	}
	return rc, brw, nil
}

// halfCloser is a connection whose write half can be closed alone (*net.TCPConn, *tls.Conn).
type halfCloser interface{ CloseWrite() error }

// releasingConn is a hijacked connection that releases its request's in-flight slot when it
// is closed (once: the Handle is exactly-once).
type releasingConn struct {
	net.Conn
	ticket connlimit.Handle
}

// Close closes the connection and releases the slot.
func (c *releasingConn) Close() error {
	err := c.Conn.Close()
	c.ticket.Release()
	return err
}

// Read marks activity, so the leak sweep leaves a live connection alone.
func (c *releasingConn) Read(p []byte) (int, error) {
	c.ticket.Touch()
	return c.Conn.Read(p)
}

// Write marks activity, like Read.
func (c *releasingConn) Write(p []byte) (int, error) {
	c.ticket.Touch()
	return c.Conn.Write(p)
}

// halfClosingConn is a releasingConn over a connection that can half-close, and only then:
// a proxy tunnel (reverse_proxy's WebSockets) that sees CloseWrite relies on it to pass an
// end of stream on and keeps waiting for the other direction. A CloseWrite that did nothing
// would leave every client of a WebSocket the backend closed hanging, holding its slot, when the
// hijacked connection cannot half-close (Caddy with the global `metrics` option).
type halfClosingConn struct{ *releasingConn }

// CloseWrite half-closes the underlying connection.
func (c halfClosingConn) CloseWrite() error { return c.Conn.(halfCloser).CloseWrite() }

// Interface guards
var (
	_ http.Hijacker = (*TrackedWriter)(nil)
	_ io.ReaderFrom = (*TrackedWriter)(nil)
)
