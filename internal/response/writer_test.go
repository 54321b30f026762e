package response

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// pipeHijacker hijacks to one end of a net.Pipe, a connection that cannot half-close (as the
// one Caddy's metrics hand over).
type pipeHijacker struct {
	http.ResponseWriter
	conn net.Conn
}

func (p pipeHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return p.conn, bufio.NewReadWriter(bufio.NewReader(p.conn), bufio.NewWriter(p.conn)), nil
}

// The hijacked connection can half-close exactly when the one it wraps can: a proxy that sees
// CloseWrite relies on it (TestUpgradedConnectionClosedByBackend in e2e).
func TestHijackedConnectionWithoutHalfClose(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c2.Close()
	tw := Track(pipeHijacker{httptest.NewRecorder(), c1}, nil, nil)
	defer tw.Done()
	conn, _, err := tw.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, ok := conn.(interface{ CloseWrite() error }); ok {
		t.Error("the hijacked connection offers CloseWrite over a connection that has none")
	}
}
