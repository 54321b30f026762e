// Package faultproxy is a TCP proxy for fault-injection tests: it forwards connections to an
// upstream server and can add latency, reset every open connection, refuse new ones, or
// partition some clients (a process) from the upstream while others pass.
package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds how long the proxy waits to reach the upstream for one connection.
const dialTimeout = 5 * time.Second

// chunkSize is the largest chunk read at once; queueLen is how many chunks one direction may
// hold in flight (read but not yet written), so that latency delays data without limiting
// throughput to one chunk per latency period.
const (
	chunkSize = 32 << 10
	queueLen  = 256
)

// Proxy forwards every accepted connection to an upstream address. It is safe for concurrent
// use.
type Proxy struct {
	upstream string
	ln       net.Listener
	ctx      context.Context // canceled by Close: aborts upstream dials
	cancel   context.CancelFunc

	latency atomic.Int64 // time.Duration added to each forwarded chunk
	refuse  atomic.Bool

	mu     sync.Mutex
	closed bool
	links  map[*link]struct{}
	// cut selects the clients of a partition (nil: none). It is asked once per connection
	// accepted during the partition, and once per open connection when the partition starts.
	cut func(client net.Conn) bool
	wg  sync.WaitGroup // every goroutine the proxy started

	closeOnce sync.Once
	closeErr  error
}

// New listens on 127.0.0.1:0 and forwards every accepted connection to upstream ("host:port").
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{upstream: upstream, ln: ln, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the host:port clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the port clients dial.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetLatency sets the delay added to each chunk forwarded in each direction; it applies to data
// read after the call, on new and existing connections alike. 0 means none.
func (p *Proxy) SetLatency(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.latency.Store(int64(d))
}

// ResetAll closes every current connection abruptly (TCP RST on both sides). New connections
// are still accepted.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
}

// Partition cuts the clients cut selects from the upstream: their open connections are reset
// now and new ones as they are accepted, while other clients pass. nil heals.
func (p *Proxy) Partition(cut func(client net.Conn) bool) {
	p.mu.Lock()
	p.cut = cut
	var cutOff []*link
	if cut != nil {
		for l := range p.links {
			if cut(l.client) {
				cutOff = append(cutOff, l)
			}
		}
	}
	p.mu.Unlock()
	for _, l := range cutOff {
		l.reset()
	}
}

// SetRefuse makes the proxy, while on, accept new connections and reset them at once, as a dead
// listener would. Existing connections keep working.
func (p *Proxy) SetRefuse(on bool) { p.refuse.Store(on) }

// Close stops listening, resets every connection and waits until every goroutine of the proxy
// has returned. It is idempotent; later calls return the first call's result.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		p.closeErr = p.ln.Close()
		p.ResetAll()
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// A transient accept error (e.g. too many open files): back off briefly.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if p.refuse.Load() || (cut != nil && cut(c)) {
			resetConn(c)
			continue
		}
		l := &link{client: c, done: make(chan struct{})}
		if !p.add(l) {
			resetConn(c)
			return
		}
		p.wg.Add(1)
		go p.serve(l)
	}
}

// add registers l unless the proxy is closed.
func (p *Proxy) add(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) remove(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// serve dials the upstream for one accepted connection and forwards both directions until both
// have ended, then closes the connection.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.remove(l)
	d := net.Dialer{Timeout: dialTimeout}
	up, err := d.DialContext(p.ctx, "tcp", p.upstream)
	if err != nil {
		l.reset() // the upstream is unreachable: the client sees a reset, as from a dead server
		return
	}
	if !l.setServer(up) {
		return // reset while dialing
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, l.client, up) }()
	go func() { defer wg.Done(); p.pipe(l, up, l.client) }()
	wg.Wait()
	l.close()
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe forwards src to dst. A reader goroutine stamps each chunk with its due time (read time
// plus the latency then set) and queues it; this goroutine writes each chunk once it is due, in
// order. EOF from src is passed on as a half-close of dst; any other failure resets the whole
// link.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	queue := make(chan chunk, queueLen)
	var readErr error
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{data: buf[:n:n], due: time.Now().Add(time.Duration(p.latency.Load()))}
				select {
				case queue <- c:
				case <-l.done:
					return
				}
			}
			if err != nil {
				readErr = err // read after close(queue) by the writer
				return
			}
		}
	}()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for c := range queue {
		if wait := time.Until(c.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.done:
				drain(queue)
				return
			}
		}
		if _, err := dst.Write(c.data); err != nil {
			l.reset()
			drain(queue)
			return
		}
	}
	if readErr == io.EOF {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			// Best effort: if the half-close fails, the connection is gone and the other
			// direction's copy ends on its own.
			_ = cw.CloseWrite()
		}
		return
	}
	l.reset() // a reset, or a read on a link closed by the other direction
}

// drain waits until the reader goroutine has ended (it ends once the link is closed), so that
// pipe never returns before it.
func drain(queue <-chan chunk) {
	for range queue {
	}
}

// link is one proxied connection: the accepted client connection and its upstream connection.
type link struct {
	mu     sync.Mutex
	client net.Conn
	server net.Conn // nil until dialed
	ended  bool
	done   chan struct{} // closed when the link is reset or closed
}

// setServer records the upstream connection, or resets it and reports false if the link was
// already ended.
func (l *link) setServer(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		resetConn(c)
		return false
	}
	l.server = c
	return true
}

// reset ends the link abruptly: both sides get a TCP RST.
func (l *link) reset() { l.end(resetConn) }

// close ends the link gracefully (both directions have finished).
func (l *link) close() { l.end(func(c net.Conn) { c.Close() }) }

func (l *link) end(closeFn func(net.Conn)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended = true
	close(l.done)
	closeFn(l.client)
	if l.server != nil {
		closeFn(l.server)
	}
}

// resetConn closes c so that the peer receives a TCP RST rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		// If this fails the Close below sends a FIN: still a closed connection, only a politer one.
		_ = tc.SetLinger(0)
	}
	c.Close()
}
