package tierbucket

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// newTestHandler sets up h on its own context (no events app) and cleans it up with tb.
func newTestHandler(tb testing.TB, h *Handler) *Handler {
	tb.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	if err := h.setup(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = h.Cleanup()
		cancel()
	})
	return h
}

// nopWriter is a ResponseWriter that keeps its header map between requests (cleared, so that
// the map's own growth is not counted as the handler's allocation).
type nopWriter struct {
	hdr    http.Header
	status int
}

func (w *nopWriter) Header() http.Header         { return w.hdr }
func (w *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nopWriter) WriteHeader(s int)           { w.status = s }

var nopNext = caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })

// benchRequest is a GET of an object (cost 1) without a replacer. Its body is empty but not
// http.NoBody: Caddy's server wraps every request's body (its read idle timeout, on by
// default), so a handler in Caddy never sees NoBody.
func benchRequest(app string) *http.Request {
	r := httptest.NewRequest("GET", "http://gw.example/bucket/object", nil)
	r.Header.Set("X-App-Id", app)
	r.Body = io.NopCloser(http.NoBody)
	return r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
}

func benchHandler(b *testing.B, cluster, headers string) *Handler {
	return newTestHandler(b, &Handler{
		Cluster: cluster,
		Key:     "{http.request.header.X-App-Id}",
		Headers: headers,
		Apps: map[string]*AppConfig{
			"hot":  {Guaranteed: 1e12, Burst: 1e12},
			"cold": {Guaranteed: 1e-6, Burst: 1},
		},
		Local: &LocalConfig{Reserve: 1 << 40},
	})
}

// runServe serves requests of app with a fresh replacer each, made the way caddyhttp's server
// makes one for every request (NewReplacer plus its http vars provider), so that what the
// handler adds to the replacer is counted as it costs in Caddy. The replacers are made in
// batches with the timer stopped.
func runServe(b *testing.B, h *Handler, app string, wantStatus int) {
	base := benchRequest(app)
	reqs := make([]*http.Request, 256)
	fresh := func() {
		for i := range reqs {
			r := new(http.Request)
			*r = *base
			caddyhttp.NewTestReplacer(r)
			reqs[i] = r
		}
	}
	w := &nopWriter{hdr: http.Header{}}
	fresh()
	for _, r := range reqs[:100] { // warm up: the first lease, pools
		_ = h.ServeHTTP(w, r, nopNext)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		b.StopTimer()
		fresh()
		b.StartTimer()
		for j := 0; j < len(reqs) && i < b.N; j, i = j+1, i+1 {
			clear(w.hdr)
			w.status = 0
			if err := h.ServeHTTP(w, reqs[j], nopNext); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	if w.status != wantStatus {
		b.Fatalf("status %d, want %d", w.status, wantStatus)
	}
}

// BenchmarkServeHTTPLocalHit is the hot path: app id from a header, cost estimate, connection
// slot, local token take, next handler, settlement, release, with the default headers (none on
// an admitted response) and the placeholders.
func BenchmarkServeHTTPLocalHit(b *testing.B) {
	runServe(b, benchHandler(b, "bench-hit", ""), "hot", 0)
}

// BenchmarkServeHTTPLocalHitHeadersBoth is the same with `headers both` (five fields).
func BenchmarkServeHTTPLocalHitHeadersBoth(b *testing.B) {
	runServe(b, benchHandler(b, "bench-hit-both", "both"), "hot", 0)
}

// BenchmarkServeHTTPLocalHitHeadersDraft is the same with `headers draft` (one field, RateLimit).
func BenchmarkServeHTTPLocalHitHeadersDraft(b *testing.B) {
	runServe(b, benchHandler(b, "bench-hit-draft", "draft"), "hot", 0)
}

// BenchmarkServeHTTPLocalReject is an app far over its quota: rejected locally (429 with the
// JSON body), no Store call.
func BenchmarkServeHTTPLocalReject(b *testing.B) {
	runServe(b, benchHandler(b, "bench-reject", ""), "cold", http.StatusTooManyRequests)
}

// BenchmarkServeHTTPLocalHitParallel is the hot path from all CPUs on one app, with the
// default headers and no replacer (a replacer per request cannot be made outside the timer
// here).
func BenchmarkServeHTTPLocalHitParallel(b *testing.B) {
	runServeParallel(b, benchHandler(b, "bench-par", ""))
}

// runServeParallel serves requests of the app "hot" with h from all CPUs at once.
func runServeParallel(b *testing.B, h *Handler) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := benchRequest("hot")
		w := &nopWriter{hdr: http.Header{}}
		for pb.Next() {
			clear(w.hdr)
			if err := h.ServeHTTP(w, r, nopNext); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkServeHTTPCore is the hot path without headers and without a replacer in the
// context (so no placeholders): app id, cost, connection slot, take, settle, release.
func BenchmarkServeHTTPCore(b *testing.B) {
	h := benchHandler(b, "bench-core", "off")
	r := benchRequest("hot")
	w := &nopWriter{hdr: http.Header{}}
	for range 100 {
		_ = h.ServeHTTP(w, r, nopNext)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := h.ServeHTTP(w, r, nopNext); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServeHTTPCoreParallel is BenchmarkServeHTTPCore from all CPUs on one app: what the
// shared counters cost when requests of one app run on several cores at once.
func BenchmarkServeHTTPCoreParallel(b *testing.B) {
	runServeParallel(b, benchHandler(b, "bench-core-par", "off"))
}

// BenchmarkServeHTTPColdCache is BenchmarkServeHTTPLocalHit with the CPU's caches cleared of
// the handler's data and code before every request, as in Caddy, where the kernel's network
// stack and the rest of the server run between two requests: its ns/req (the handler alone,
// timed around each call, clock reads included) is what a request costs in Caddy, 2–3 × the
// warm figure (docs/performance.md, "Cache misses").
func BenchmarkServeHTTPColdCache(b *testing.B) {
	runServeCold(b, benchHandler(b, "bench-cold", ""))
}

// BenchmarkServeHTTPCoreColdCache is the core path (no header, no replacer) with cold caches.
func BenchmarkServeHTTPCoreColdCache(b *testing.B) {
	runServeCold(b, benchHandler(b, "bench-core-cold", "off"))
}

// evictBuf is larger than the L2 cache of a server core (0.5–2 MiB), so that streaming through
// it leaves the handler's lines in L3 at best.
var evictBuf = make([]byte, 4<<20)

// runServeCold serves requests of the app "hot" with h, evicting the caches before each, and
// reports the time spent in the handler per request (ns/req).
func runServeCold(b *testing.B, h *Handler) {
	r := benchRequest("hot")
	w := &nopWriter{hdr: http.Header{}}
	for range 100 {
		_ = h.ServeHTTP(w, r, nopNext)
	}
	var inside time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := 0; i < len(evictBuf); i += 64 {
			evictBuf[i]++
		}
		clear(w.hdr)
		start := time.Now()
		if err := h.ServeHTTP(w, r, nopNext); err != nil {
			b.Fatal(err)
		}
		inside += time.Since(start)
	}
	b.ReportMetric(float64(inside.Nanoseconds())/float64(b.N), "ns/req")
}

// TestServeHTTPAllocations pins the request path's allocations for an admitted GET as Caddy
// hands it over (its body wrapped, a fresh replacer): none on the core path (with an adaptive
// capacity too), and with the placeholders the two docs/performance.md explains.
func TestServeHTTPAllocations(t *testing.T) {
	core := newTestHandler(t, &Handler{
		Cluster: "allocs-core", Key: "{http.request.header.X-App-Id}", Headers: "off",
		Apps:  map[string]*AppConfig{"hot": {Guaranteed: 1e12, Burst: 1e12}},
		Local: &LocalConfig{Reserve: 1 << 40},
	})
	w := &nopWriter{hdr: http.Header{}}
	r := benchRequest("hot")
	if n := testing.AllocsPerRun(1000, func() { _ = core.ServeHTTP(w, r, nopNext) }); n != 0 {
		t.Errorf("core path: %v allocations per request, want 0", n)
	}

	// An adaptive capacity adds a time stamp, a status check and the app's counters (allocated
	// on its first answer): no allocation per request.
	learning := newTestHandler(t, &Handler{
		Cluster: "allocs-adaptive", Key: "{http.request.header.X-App-Id}", Headers: "off",
		Capacity: 1e13, Adaptive: &AdaptiveConfig{},
		Apps:  map[string]*AppConfig{"hot": {Guaranteed: 1e12, Burst: 1e12}},
		Local: &LocalConfig{Reserve: 1 << 40},
	})
	if n := testing.AllocsPerRun(1000, func() { _ = learning.ServeHTTP(w, r, nopNext) }); n != 0 {
		t.Errorf("adaptive capacity: %v allocations per request, want 0", n)
	}

	full := newTestHandler(t, &Handler{
		Cluster: "allocs-full", Key: "{http.request.header.X-App-Id}",
		Apps:  map[string]*AppConfig{"hot": {Guaranteed: 1e12, Burst: 1e12}},
		Local: &LocalConfig{Reserve: 1 << 40},
	})
	const runs = 1000
	reqs := make([]*http.Request, runs+1) // AllocsPerRun calls once more to warm up
	for i := range reqs {
		reqs[i] = new(http.Request)
		*reqs[i] = *r
		caddyhttp.NewTestReplacer(reqs[i])
	}
	i := 0
	n := testing.AllocsPerRun(runs, func() {
		clear(w.hdr)
		_ = full.ServeHTTP(w, reqs[i], nopNext)
		i++
	})
	if n != 2 {
		t.Errorf("with the placeholders: %v allocations per request, want 2 (the outcome, and the placeholder function the replacer holds)", n)
	}
}
