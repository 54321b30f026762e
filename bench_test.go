package tierbucket

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

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

// benchRequest is a GET of an object (cost 1) carrying the replacer in its context, as
// caddyhttp's server prepares it.
func benchRequest(app string) *http.Request {
	r := httptest.NewRequest("GET", "http://gw.example/bucket/object", nil)
	r.Header.Set("X-App-Id", app)
	repl := caddy.NewReplacer()
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	return r.WithContext(ctx)
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

func runServe(b *testing.B, h *Handler, app string, wantStatus int) {
	r := benchRequest(app)
	w := &nopWriter{hdr: http.Header{}}
	// warm up: the first lease, pools, the replacer's map
	for range 100 {
		_ = h.ServeHTTP(w, r, nopNext)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.hdr)
		w.status = 0
		if err := h.ServeHTTP(w, r, nopNext); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if w.status != wantStatus {
		b.Fatalf("status %d, want %d", w.status, wantStatus)
	}
}

// BenchmarkServeHTTPLocalHit is the hot path: app id from a header, cost
// estimate, connection slot, local token take, next handler, settlement, release, with the
// default headers (both) and the placeholders.
func BenchmarkServeHTTPLocalHit(b *testing.B) {
	runServe(b, benchHandler(b, "bench-hit", ""), "hot", 0)
}

// BenchmarkServeHTTPLocalHitHeadersOff is the same without rate-limit headers.
func BenchmarkServeHTTPLocalHitHeadersOff(b *testing.B) {
	runServe(b, benchHandler(b, "bench-hit-off", "off"), "hot", 0)
}

// BenchmarkServeHTTPLocalReject is an app far over its quota: rejected locally (429 with the
// JSON body), no Store call.
func BenchmarkServeHTTPLocalReject(b *testing.B) {
	runServe(b, benchHandler(b, "bench-reject", ""), "cold", http.StatusTooManyRequests)
}

// BenchmarkServeHTTPLocalHitParallel is the hot path from all CPUs on one app.
func BenchmarkServeHTTPLocalHitParallel(b *testing.B) {
	h := benchHandler(b, "bench-par", "")
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
	r := httptest.NewRequest("GET", "http://gw.example/bucket/object", nil)
	r.Header.Set("X-App-Id", "hot")
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
