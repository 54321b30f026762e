// Package testnet hands out loopback ports to tests and harnesses.
package testnet

import (
	"fmt"
	"net"
	"strconv"
	"testing"
)

// FreePort returns a loopback TCP port that was free a moment ago, or fails the test.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := FreePortWith(0)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// FreePortWith returns a loopback TCP port p that was free a moment ago; with an offset > 0,
// p+offset was free too (a Redis Cluster node also listens on its bus port, p+10000).
func FreePortWith(offset int) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if offset <= 0 {
			return port, nil
		}
		if port+offset > 65535 {
			continue
		}
		if bl, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+offset)); err == nil {
			bl.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("testnet: no free loopback port (offset %d)", offset)
}
