package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// echoServer accepts connections and echoes everything back until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads the echo back.
func roundTrip(c net.Conn, msg []byte) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo = %q, want %q", got, msg)
	}
	return nil
}

// dialRead dials addr and reads once, returning the first error. The kernel completes the
// handshake before the proxy accepts, so a reset usually fails the first read; it may also
// reach the client before its connect has returned, failing the dial itself.
func dialRead(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

// wantReset asserts that err is a failed read, not a timeout of the test's own deadline.
func wantReset(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("read succeeded, want a reset connection")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("read timed out (%v): the connection was not reset", err)
	}
}

func TestEcho(t *testing.T) {
	p := newProxy(t, echoServer(t))
	for i := 0; i < 3; i++ { // several concurrent connections
		c := dial(t, p.Addr())
		if err := roundTrip(c, []byte(fmt.Sprintf("hello %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// A payload larger than one chunk keeps its bytes and order.
	big := make([]byte, 3*chunkSize+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	c := dial(t, p.Addr())
	var werr error
	done := make(chan struct{})
	go func() { defer close(done); _, werr = c.Write(big) }()
	got := make([]byte, len(big))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	<-done
	if werr != nil {
		t.Fatal(werr)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("large payload corrupted")
	}
}

func TestHalfClose(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c) // the echo, then EOF passed back through the proxy
	if err != nil || string(got) != "bye" {
		t.Fatalf("ReadAll = %q, %v; want \"bye\", EOF", got, err)
	}
}

func TestLatency(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	if err := roundTrip(c, []byte("warm")); err != nil {
		t.Fatal(err)
	}
	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	if err := roundTrip(c, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	// Each direction adds d.
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip took %v with latency %v; want at least %v", rtt, d, 2*d)
	}

	// Many chunks in flight at once keep their order.
	var want bytes.Buffer
	for i := 0; i < 50; i++ {
		msg := fmt.Sprintf("chunk %02d;", i)
		want.WriteString(msg)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // separate reads in the proxy
	}
	got := make([]byte, want.Len())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("got %q, want %q", got, want.Bytes())
	}

	p.SetLatency(0)
	if err := roundTrip(c, []byte("fast")); err != nil {
		t.Fatal(err)
	}
}

func TestResetAll(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	if err := roundTrip(c, []byte("x")); err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		readErr <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read block (the outcome is the same if it has not)
	p.ResetAll()
	wantReset(t, <-readErr)

	// New connections still work.
	c2 := dial(t, p.Addr())
	if err := roundTrip(c2, []byte("again")); err != nil {
		t.Fatal(err)
	}
}

func TestRefuse(t *testing.T) {
	p := newProxy(t, echoServer(t))
	old := dial(t, p.Addr())
	if err := roundTrip(old, []byte("before")); err != nil {
		t.Fatal(err)
	}
	p.SetRefuse(true)
	wantReset(t, dialRead(p.Addr()))
	if err := roundTrip(old, []byte("still")); err != nil {
		t.Fatalf("existing connection broken by SetRefuse: %v", err)
	}
	p.SetRefuse(false)
	if err := roundTrip(dial(t, p.Addr()), []byte("after")); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachableUpstream(t *testing.T) {
	// Port 1 (tcpmux) is privileged and not served on a test machine. (A port freed by closing a
	// listener could be handed to the proxy itself, which would then proxy to itself.)
	p := newProxy(t, "127.0.0.1:1")
	wantReset(t, dialRead(p.Addr()))
}

func TestCloseIdempotentNoLeak(t *testing.T) {
	upstream := echoServer(t)
	before := runtime.NumGoroutine()
	p, err := New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p.SetLatency(50 * time.Millisecond)
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c := dial(t, p.Addr())
		if err := roundTrip(c, []byte("x")); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	c := conns[0]
	c.Write([]byte("in flight")) // queued behind the latency when Close runs
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 16))
	wantReset(t, err)
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("dial succeeded after Close")
	}
	for _, c := range conns {
		c.Close()
	}
	// The proxy waited for its goroutines; the echo server's handlers for the reset connections
	// end shortly after, so poll.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after Close\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPartition: the clients a partition selects are reset, open and new connections alike,
// while the others pass; healing lets them connect again.
func TestPartition(t *testing.T) {
	p := newProxy(t, echoServer(t))
	keep, cutOff := dial(t, p.Addr()), dial(t, p.Addr())
	for _, c := range []net.Conn{keep, cutOff} {
		if err := roundTrip(c, []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	cutPort := cutOff.LocalAddr().(*net.TCPAddr).Port
	p.Partition(func(c net.Conn) bool { return c.RemoteAddr().(*net.TCPAddr).Port == cutPort })
	cutOff.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := cutOff.Read(make([]byte, 1))
	wantReset(t, err)
	if err := roundTrip(keep, []byte("outside")); err != nil {
		t.Fatalf("a connection outside the partition: %v", err)
	}

	p.Partition(func(net.Conn) bool { return true })
	wantReset(t, dialRead(p.Addr()))
	p.Partition(nil)
	if err := roundTrip(dial(t, p.Addr()), []byte("healed")); err != nil {
		t.Fatalf("after healing: %v", err)
	}
	if p.Port() != p.ln.Addr().(*net.TCPAddr).Port {
		t.Fatal("Port is not the listener's")
	}
}
