package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestUpgradedConnectionClosedByBackend: a connection upgraded through rate_limit and
// reverse_proxy (a WebSocket) that the backend closes is closed toward the client too, and its
// in-flight slot comes back, with Caddy's `metrics` option on. Caddy's metrics hand the
// limiter a hijacked connection that cannot half-close; a wrapper that claimed it could and did
// nothing would leave the proxy waiting for the client for ever: WebSocket clients would hang,
// their slots held, and the app would be locked out at max_connections.
func TestUpgradedConnectionClosedByBackend(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close() // then the backend ends the session
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		_ = brw.Flush()
		msg := make([]byte, 3)
		if _, err := io.ReadFull(brw, msg); err == nil && string(msg) == "bye" {
			_, _ = conn.Write([]byte("bye"))
		}
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	g := startGatewayGlobal(t, "upgrade", fmt.Sprintf(`	rate_limit {
		cluster upgrade
		key {http.request.header.X-App-Id}
		app ws {
			guaranteed 100
			max_connections 1
		}
	}
	reverse_proxy %s`, u.Host), "metrics")

	for i := range 3 { // each session must give its only slot back for the next one
		c, err := net.Dial("tcp", strings.TrimPrefix(g.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: 127.0.0.1\r\nX-App-Id: ws\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\nbye")
		// Waiting for the end of the stream is the test; the deadline only bounds a failure.
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		rest, err := io.ReadAll(bufio.NewReader(c))
		c.Close()
		if err != nil || !strings.HasPrefix(string(rest), "HTTP/1.1 101") || !strings.HasSuffix(string(rest), "bye") {
			t.Fatalf("session %d: read %q, %v; want the 101, the backend's bye, then the end of the stream", i, rest, err)
		}
		g.waitMetric(5*time.Second, func(v float64) bool { return v == 0 },
			"caddy_rate_limit_connections", `cluster="upgrade"`, `app="ws"`)
	}
}
