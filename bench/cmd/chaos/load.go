package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// appLoad is one app of the steady multi-tenant load.
type appLoad struct {
	id    string
	rate  float64 // offered requests per second, across the fleet
	kind  string  // under (far under its quota), over (1.5× its quota), conns (connection limit)
	slow  bool    // the backend holds its requests (conns)
	tally *tally
}

// tally counts one app's answers as the clients saw them.
type tally struct {
	ok, limited, other4xx, bad5xx, failed, excused atomic.Int64

	mu       sync.Mutex
	perSec   map[int64]int64 // second since the run's start → 2xx answers
	non2xx   []event         // non-2xx answers (kept for apps under quota)
	firstBad string
}

// event is a non-2xx answer of an app under its quota, kept for the report.
type event struct {
	at     time.Duration
	status int
	body   string
}

func newTally() *tally { return &tally{perSec: map[int64]int64{}} }

// backend is the upstream every gateway proxies to: it answers at once, except for the
// connection-limited app, whose requests it holds for holdFor (or until the gateway gives up
// on them), counting them in flight.
type backend struct {
	srv      *http.Server
	addr     string
	holdFor  time.Duration
	inFlight atomic.Int64
	start    time.Time

	mu    sync.Mutex
	peaks []peak // in-flight maxima above the limit, for the report
	worst int64
	limit int64
}

// peak is an in-flight count of the connection-limited app seen at the backend.
type peak struct {
	at time.Duration
	n  int64
}

func startBackend(holdFor time.Duration, limit int64, start time.Time) (*backend, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &backend{addr: ln.Addr().String(), holdFor: holdFor, limit: limit, start: start}
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Chaos-Slow") == "" {
		_, _ = io.WriteString(w, "ok")
		return
	}
	n := b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	b.mu.Lock()
	if n > b.worst {
		b.worst = n
	}
	if n > b.limit {
		b.peaks = append(b.peaks, peak{at: time.Since(b.start), n: n})
	}
	b.mu.Unlock()
	select {
	case <-time.After(b.holdFor):
	case <-r.Context().Done():
		return
	}
	_, _ = io.WriteString(w, "ok")
}

func (b *backend) close() { _ = b.srv.Close() }

// loader drives the apps' load over the gateways that are up.
type loader struct {
	apps   []*appLoad
	gws    []*gateway
	client *http.Client
	start  time.Time
	// perGw counts 2xx answers per gateway and second (the bound of statistics a SIGKILL may
	// take with it).
	perGw []map[int64]int64
	mu    sync.Mutex
}

func newLoader(apps []*appLoad, gws []*gateway, start time.Time) *loader {
	// Idle connections close after 2 s: a gateway's goroutines then follow the requests in
	// flight, not the most connections a slow moment ever opened (its goroutine series must be
	// flat unless something leaks).
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 2 * time.Second, DisableCompression: true}
	l := &loader{apps: apps, gws: gws, start: start, client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
	for range gws {
		l.perGw = append(l.perGw, map[int64]int64{})
	}
	return l
}

// run sends each app's requests at its rate until ctx ends, each on a gateway that is up
// (chosen at random), each request in its own goroutine so a slow one does not hold the pace.
func (l *loader) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, a := range l.apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7)) //nolint:gosec // G404: which gateway takes a request, not a secret
			var inner sync.WaitGroup
			defer inner.Wait()
			sent := 0
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				due := int(a.rate * time.Since(l.start).Seconds())
				for ; sent < due; sent++ {
					gi, gen := l.pick(rng)
					if gi < 0 {
						continue // no gateway is up: the request is not sent
					}
					inner.Add(1)
					go func() { defer inner.Done(); l.send(a, gi, gen) }()
				}
			}
		}()
	}
	wg.Wait()
}

// pick chooses a gateway that is up, and its stop count read before it was seen up: a stop
// after the pick changes the count and excuses the request's failure.
func (l *loader) pick(rng *rand.Rand) (int, int64) {
	var up []int
	gens := make([]int64, len(l.gws))
	for i, g := range l.gws {
		gens[i] = g.gen.Load()
		if g.up.Load() {
			up = append(up, i)
		}
	}
	if len(up) == 0 {
		return -1, 0
	}
	i := up[rng.IntN(len(up))]
	return i, gens[i]
}

func (l *loader) send(a *appLoad, gi int, gen int64) {
	g := l.gws[gi]
	req, _ := http.NewRequest(http.MethodGet, g.base()+"/b/o", nil)
	req.Header.Set("X-App-Id", a.id)
	if a.slow {
		req.Header.Set("X-Chaos-Slow", "1")
	}
	resp, err := l.client.Do(req)
	t := a.tally
	if err != nil {
		if g.gen.Load() != gen || !g.up.Load() {
			t.excused.Add(1) // the gateway was stopped while the request ran
			return
		}
		t.failed.Add(1)
		t.note(fmt.Sprintf("%s at %v: %v", g.name, time.Since(l.start).Round(time.Millisecond), err))
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	sec := int64(time.Since(l.start) / time.Second)
	switch {
	case resp.StatusCode >= 500:
		t.bad5xx.Add(1)
		t.note(fmt.Sprintf("%s: %d %s", g.name, resp.StatusCode, body))
	case resp.StatusCode/100 == 2:
		t.ok.Add(1)
		t.mu.Lock()
		t.perSec[sec]++
		t.mu.Unlock()
		l.mu.Lock()
		l.perGw[gi][sec]++
		l.mu.Unlock()
		return
	case resp.StatusCode == http.StatusTooManyRequests:
		t.limited.Add(1)
	default:
		t.other4xx.Add(1)
	}
	if a.kind == "under" || resp.StatusCode >= 500 {
		t.mu.Lock()
		t.non2xx = append(t.non2xx, event{at: time.Since(l.start), status: resp.StatusCode, body: g.name + ": " + string(body)})
		t.mu.Unlock()
	}
}

func (t *tally) note(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.firstBad == "" {
		t.firstBad = s
	}
}

// admittedBefore is the 2xx answers gateway gi gave in the window seconds up to at.
func (l *loader) admittedBefore(gi int, at time.Duration, window int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := int64(at / time.Second)
	var n int64
	for s := end - window; s <= end; s++ {
		n += l.perGw[gi][s]
	}
	return n
}
