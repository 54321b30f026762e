package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy forwards TCP connections to one Redis server and injects the network faults of the
// schedule: latency on every chunk, a reset of every open connection, and a partition of one
// gateway process (its connections are reset and new ones refused; other clients, such as the
// Redis servers' own replication links and sentinels, pass).
type proxy struct {
	upstream string
	ln       net.Listener
	latency  atomic.Int64 // time.Duration added to each forwarded chunk

	mu    sync.Mutex
	links map[*link]struct{}
	// cut reports whether a client connection belongs to a partitioned gateway; nil: no
	// partition. It is asked once per connection accepted during a partition and once per
	// open connection when a partition starts.
	cut func(client net.Conn) bool
	wg  sync.WaitGroup
}

// link is one proxied connection: the client's and the server's side.
type link struct {
	client, server net.Conn
	once           sync.Once
}

// newProxy listens on a free loopback port and forwards to upstream.
func newProxy(upstream string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{upstream: upstream, ln: ln, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *proxy) setLatency(d time.Duration) { p.latency.Store(int64(d)) }

// resetAll resets every open connection (RST to both sides), as a flapping network would.
func (p *proxy) resetAll() {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
}

// partition cuts the clients cut selects (nil heals): their open connections are reset now,
// new ones as they come.
func (p *proxy) partition(cut func(net.Conn) bool) {
	p.mu.Lock()
	p.cut = cut
	var victims []*link
	if cut != nil {
		for l := range p.links {
			if cut(l.client) {
				victims = append(victims, l)
			}
		}
	}
	p.mu.Unlock()
	for _, l := range victims {
		l.reset()
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.resetAll()
	p.wg.Wait()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut != nil && cut(c) {
			resetConn(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	s, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.upstream)
	cancel()
	if err != nil {
		resetConn(c) // the server is down: the client sees a reset, as without the proxy
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, c, s) }()
	go func() { defer wg.Done(); p.pipe(l, s, c) }()
	wg.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// chunk is data read at a time; it is written once the latency in force has passed since.
type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies src to dst, delaying each chunk by the latency in force when it was read; reads
// go on while earlier chunks wait, so latency does not cut throughput.
func (p *proxy) pipe(l *link, src, dst net.Conn) {
	queue := make(chan chunk, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range queue {
			if wait := time.Until(ch.at); wait > 0 {
				time.Sleep(wait)
			}
			if _, err := dst.Write(ch.data); err != nil {
				l.close()
				for range queue { //nolint:revive // drain so the reader never blocks
				}
				return
			}
		}
	}()
	for {
		buf := make([]byte, 16<<10)
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{data: buf[:n], at: time.Now().Add(time.Duration(p.latency.Load()))}
		}
		if err != nil {
			close(queue)
			<-done
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			l.close()
			return
		}
	}
}

func (l *link) reset() {
	l.once.Do(func() { resetConn(l.client); resetConn(l.server) })
}

func (l *link) close() {
	l.once.Do(func() { _ = l.client.Close(); _ = l.server.Close() })
}

// resetConn closes c with an RST (linger 0) rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
