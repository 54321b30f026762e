package testnet

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortWith(t *testing.T) {
	p, err := FreePortWith(10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{p, p + 10000} {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		l.Close()
	}
	if q := FreePort(t); q <= 0 || q > 65535 {
		t.Fatalf("FreePort = %d", q)
	}
}
