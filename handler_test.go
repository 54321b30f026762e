package tierbucket

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/cost"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// connCurrent returns the in-flight count of app ("" = the cluster) on h's cluster.
func connCurrent(h *Handler, app string) int64 {
	for _, s := range h.state.Connections().Snapshot() {
		if s.App == app {
			return s.Current
		}
	}
	return 0
}

// unitHandler is a handler writing both header sets: the unit tests read the legacy fields
// (X-RateLimit-Remaining and friends) and the draft ones.
func unitHandler(t *testing.T, cluster string, apps map[string]*AppConfig) *Handler {
	return newTestHandler(t, &Handler{
		Cluster: cluster,
		Key:     "{http.request.header.X-App-Id}",
		Apps:    apps,
		Headers: "both",
	})
}

func get(app string) *http.Request {
	r := httptest.NewRequest("GET", "http://gw.example/bucket/object", nil)
	r.Header.Set("X-App-Id", app)
	return r
}

// TestConnectionLimit: max_connections bounds in-flight requests; the rejection is 429
// app_limit_exceeded with the X-Connection-* headers, and the slot comes back at the end.
func TestConnectionLimit(t *testing.T) {
	h := unitHandler(t, "unit-conn", map[string]*AppConfig{"a": {Guaranteed: 1000, Burst: 1000, MaxConnections: 1}})
	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- h.ServeHTTP(httptest.NewRecorder(), get("a"), caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
			close(inside)
			<-release
			return nil
		}))
	}()
	<-inside
	if n := connCurrent(h, "a"); n != 1 {
		t.Errorf("in flight %d, want 1", n)
	}
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, get("a"), nopNext); err != nil {
		t.Fatal(err)
	}
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"reason":"app_limit_exceeded"`) {
		t.Errorf("second request: %d %s", w.Code, w.Body)
	}
	for hdr, want := range map[string]string{"X-Connection-Limit": "1", "X-Connection-Current": "1", "X-Connection-Remaining": "0"} {
		if got := w.Header().Get(hdr); got != want {
			t.Errorf("%s = %q, want %q", hdr, got, want)
		}
	}
	// The connections ran out, not the tokens: the quota headers say what is left.
	if got := w.Header().Get("RateLimit"); strings.Contains(got, ";r=0;") || !strings.Contains(got, ";r=") {
		t.Errorf("RateLimit %q on a connection-limit rejection, want the tokens left", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := connCurrent(h, "a"); n != 0 {
		t.Errorf("in flight after the end: %d", n)
	}
	w = httptest.NewRecorder()
	_ = h.ServeHTTP(w, get("a"), nopNext)
	if w.Code != 200 {
		t.Errorf("after release: %d", w.Code)
	}
}

// TestSlotReleasedOnPanic: a panicking handler still releases its slot.
func TestSlotReleasedOnPanic(t *testing.T) {
	h := unitHandler(t, "unit-panic", map[string]*AppConfig{"a": {Guaranteed: 1000}})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		_ = h.ServeHTTP(httptest.NewRecorder(), get("a"), caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
			panic("boom")
		}))
	}()
	if n := connCurrent(h, "a"); n != 0 {
		t.Errorf("in flight after a panic: %d", n)
	}
	if n := connCurrent(h, ""); n != 0 {
		t.Errorf("cluster in flight after a panic: %d", n)
	}
}

// TestHijackedConnectionReleasesOnClose: a hijacked connection (a WebSocket) keeps its slot
// after the handler returns, until the connection is closed.
func TestHijackedConnectionReleasesOnClose(t *testing.T) {
	h := unitHandler(t, "unit-hijack", map[string]*AppConfig{"a": {Guaranteed: 1000}})
	hijacked := make(chan net.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return err
			}
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
			_ = brw.Flush()
			hijacked <- conn
			return nil // the handler returns; the connection lives on
		}))
		if err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /bucket/object HTTP/1.1\r\nHost: x\r\nX-App-Id: a\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, "101") {
		t.Fatalf("upgrade: %q %v", line, err)
	}
	conn := <-hijacked
	if _, ok := conn.(interface{ CloseWrite() error }); !ok {
		t.Error("the hijacked connection lost CloseWrite")
	}
	if n := connCurrent(h, "a"); n != 1 {
		t.Errorf("in flight while the hijacked connection is open: %d, want 1", n)
	}
	// traffic on the hijacked connection passes through the wrapper
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "pong")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "pong" {
		t.Errorf("read on the hijacked connection: %q %v", buf, err)
	}
	_ = conn.Close()
	if n := connCurrent(h, "a"); n != 0 {
		t.Errorf("in flight after close: %d, want 0", n)
	}
	_ = conn.Close() // a second close releases nothing more
	if n := connCurrent(h, ""); n != 0 {
		t.Errorf("cluster in flight %d", n)
	}
}

// remainingAfter sends one more cheap request and returns its X-RateLimit-Remaining.
func remainingAfter(t *testing.T, h *Handler, app string) string {
	t.Helper()
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, get(app), nopNext); err != nil {
		t.Fatal(err)
	}
	return w.Header().Get("X-RateLimit-Remaining")
}

// TestStreamingBodySettled: a chunked upload is charged stream_estimate up front and settled to
// the bytes actually read.
func TestStreamingBodySettled(t *testing.T) {
	h := unitHandler(t, "unit-stream", map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 100}})
	body := strings.Repeat("x", 5*65536) // 5 quanta
	r := httptest.NewRequest("PUT", "http://gw.example/bucket/object", io.NopCloser(strings.NewReader(body)))
	r.ContentLength = -1 // streaming: no Content-Length
	r.Header.Set("X-App-Id", "a")
	w := httptest.NewRecorder()
	err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	// estimate: PUT 5 + 1 MiB / 64 KiB = 21; actual: 5 + 5 = 10
	if got := w.Header().Get("X-RateLimit-Cost"); got != "21" {
		t.Errorf("estimated cost %q, want 21", got)
	}
	if got := remainingAfter(t, h, "a"); got != "89" { // 100 - 10 - 1
		t.Errorf("remaining after settlement %q, want 89", got)
	}
}

// TestNextErrorKeepsTokens: a request admitted and then failed downstream stays charged.
func TestNextErrorKeepsTokens(t *testing.T) {
	h := unitHandler(t, "unit-err", map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 10}})
	boom := errors.New("backend down")
	err := h.ServeHTTP(httptest.NewRecorder(), get("a"), caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		return caddyhttp.Error(http.StatusBadGateway, boom)
	}))
	if !errors.Is(err, boom) {
		t.Fatalf("error not passed on: %v", err)
	}
	if got := remainingAfter(t, h, "a"); got != "8" {
		t.Errorf("remaining %q, want 8 (the failed request stays charged)", got)
	}
	if n := connCurrent(h, "a"); n != 0 {
		t.Errorf("in flight %d", n)
	}
}

// TestResponseBytesCharged: with response_bytes the response body is charged at settlement.
func TestResponseBytesCharged(t *testing.T) {
	h := newTestHandler(t, &Handler{
		Cluster: "unit-resp",
		Key:     "{http.request.header.X-App-Id}",
		Apps:    map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 100}},
		Cost:    costConfigResponseBytes(),
		Headers: "both",
	})
	w := httptest.NewRecorder()
	err := h.ServeHTTP(w, get("a"), caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		// 2 quanta through ReadFrom (what the file server and the proxy use), 1 through Write
		if _, err := w.(io.ReaderFrom).ReadFrom(io.LimitReader(strings.NewReader(strings.Repeat("y", 2*65536)), 1<<20)); err != nil {
			return err
		}
		_, err := w.Write([]byte(strings.Repeat("z", 65536)))
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	// GET 1 + 3 quanta of response = 4
	if got := remainingAfter(t, h, "a"); got != "95" { // 100 - 4 - 1
		t.Errorf("remaining %q, want 95", got)
	}
}

// TestTicketHandleIsGenerationSafe guards the assumption the tracked writer (internal/response) relies on: a Handle of a
// released ticket never releases a later acquisition.
func TestTicketHandleIsGenerationSafe(t *testing.T) {
	c := connlimit.New(connlimit.Config{}, nil)
	defer c.Close()
	t1, _ := c.Acquire("a", 0)
	h1 := t1.Handle()
	t1.Release()
	t2, _ := c.Acquire("a", 0)
	h1.Release()
	_, cur := c.Limits("a", 0)
	if cur != 1 {
		t.Errorf("stale handle released a live slot: current %d", cur)
	}
	t2.Release()
}

func costConfigResponseBytes() *cost.Config { return &cost.Config{ResponseBytes: true} }

// eventRecorder is an events-app subscriber that keeps what it receives.
type eventRecorder struct{ got []caddy.Event }

func (r *eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	r.got = append(r.got, e)
	return nil
}

// TestRejectionEmitsEvent: every rejection emits rate_limit_exceeded with app, reason and cost.
func TestRejectionEmitsEvent(t *testing.T) {
	h := unitHandler(t, "unit-event", map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 1}})
	ev := new(caddyevents.App)
	if err := ev.Provision(newCtx(t)); err != nil {
		t.Fatal(err)
	}
	rec := new(eventRecorder)
	if err := ev.On("rate_limit_exceeded", rec); err != nil {
		t.Fatal(err)
	}
	h.events = ev
	for i := 0; i < 2; i++ {
		_ = h.ServeHTTP(httptest.NewRecorder(), get("a"), nopNext)
	}
	if len(rec.got) != 1 {
		t.Fatalf("%d events, want 1 (one rejection)", len(rec.got))
	}
	d := rec.got[0].Data
	if rec.got[0].Name() != "rate_limit_exceeded" || d["app"] != "a" || d["reason"] != "app_exhausted" ||
		d["cost"] != int64(1) || d["cluster"] != "unit-event" || d["shadow"] != false {
		t.Errorf("event %s %v", rec.got[0].Name(), d)
	}
}

// TestGeneralPlaceholderKey: a key that is not one of the fast paths goes through the replacer.
func TestGeneralPlaceholderKey(t *testing.T) {
	h := newTestHandler(t, &Handler{
		Cluster: "unit-key",
		Key:     "tenant-{http.request.uri.query.app}",
		Apps:    map[string]*AppConfig{"tenant-x": {Guaranteed: 0.001, Burst: 1}},
	})
	r := httptest.NewRequest("GET", "http://gw.example/bucket/object?app=x", nil)
	repl := caddyhttp.NewTestReplacer(r)
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	codes := []int{}
	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		_ = h.ServeHTTP(w, r, nopNext)
		codes = append(codes, w.Code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Errorf("statuses %v, want [200 429] (tenant-x has a burst of 1)", codes)
	}
	if app, _ := repl.GetString("http.rate_limit.app"); app != "tenant-x" {
		t.Errorf("app placeholder %q", app)
	}
	// the default key is the host without its port
	hd := newTestHandler(t, &Handler{
		Cluster: "unit-host", UnknownApp: "reject",
		Apps: map[string]*AppConfig{"gw.example": {Guaranteed: 1}},
	})
	w := httptest.NewRecorder()
	_ = hd.ServeHTTP(w, httptest.NewRequest("GET", "http://gw.example:8443/b/k", nil), nopNext)
	if w.Code != 200 {
		t.Errorf("host key: %d %s", w.Code, w.Body)
	}
}

// TestHeaderValuesNotShared: header values are per request, so a later handler that rewrites
// a value in place (a deferred `header` replace does) cannot change other responses.
func TestHeaderValuesNotShared(t *testing.T) {
	h := unitHandler(t, "unit-shared-hdr", map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 1}})
	_ = h.ServeHTTP(httptest.NewRecorder(), get("a"), nopNext)
	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		_ = h.ServeHTTP(w, get("a"), nopNext)
		if w.Code != 429 {
			t.Fatalf("status %d", w.Code)
		}
		for _, k := range []string{"Content-Type", "X-Content-Type-Options", "Retry-After", "Ratelimit-Policy"} {
			if got := w.Header()[k]; len(got) != 1 || strings.HasPrefix(got[0], "rewritten") {
				t.Fatalf("response %d: %s = %q", i+1, k, got)
			}
			w.Header()[k][0] = "rewritten" // what a later handler may do
		}
	}
}

// TestShadowEmitsEventAndLetsThrough: in shadow mode a would-be rejection emits the event
// (shadow=true), is counted, and the request still reaches the next handler.
func TestShadowEmitsEventAndLetsThrough(t *testing.T) {
	h := newTestHandler(t, &Handler{
		Cluster: "unit-shadow-event",
		Key:     "{http.request.header.X-App-Id}",
		Apps:    map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 1, MaxConnections: 1}},
		Shadow:  true,
	})
	ev := new(caddyevents.App)
	if err := ev.Provision(newCtx(t)); err != nil {
		t.Fatal(err)
	}
	rec := new(eventRecorder)
	_ = ev.On("rate_limit_exceeded", rec)
	h.events = ev
	reached := 0
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { reached++; return nil })
	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, get("a"), next); err != nil || w.Code != 200 {
			t.Fatalf("request %d: %d %v", i+1, w.Code, err)
		}
	}
	if reached != 3 {
		t.Errorf("next handler reached %d times, want 3", reached)
	}
	if len(rec.got) != 2 || rec.got[0].Data["shadow"] != true || rec.got[0].Data["reason"] != "app_exhausted" {
		t.Errorf("events %d %v", len(rec.got), rec.got)
	}
	if n := connCurrent(h, "a"); n != 0 {
		t.Errorf("in flight %d after shadow requests", n)
	}
	var rejected int64
	for _, st := range h.state.Limiter().Stats() {
		if st.Label == "a" {
			rejected = st.Requests[store.ReasonAppExhausted]
		}
	}
	if rejected != 2 {
		t.Errorf("would-be rejections counted %d, want 2", rejected)
	}
}

// TestRollbackOnDownstream429: a request rejected with 429 further down the chain (another
// limiter, or the backend's throttling) gets everything it took back; other errors do not.
func TestRollbackOnDownstream429(t *testing.T) {
	h := unitHandler(t, "unit-rollback", map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 10}})
	written := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusTooManyRequests)
		return nil
	})
	returned := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		return caddyhttp.Error(http.StatusTooManyRequests, errors.New("later limiter"))
	})
	unauthorized := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		return caddyhttp.Error(http.StatusUnauthorized, errors.New("no"))
	})
	_ = h.ServeHTTP(httptest.NewRecorder(), get("a"), written)
	_ = h.ServeHTTP(httptest.NewRecorder(), get("a"), returned)
	if got := remainingAfter(t, h, "a"); got != "9" { // both rolled back; this GET takes 1
		t.Errorf("remaining %q after two downstream 429s, want 9", got)
	}
	_ = h.ServeHTTP(httptest.NewRecorder(), get("a"), unauthorized)
	if got := remainingAfter(t, h, "a"); got != "7" { // the 401 stays charged
		t.Errorf("remaining %q after a downstream 401, want 7", got)
	}
}

// TestBackendThrottleStaysCharged: a 429 or 503 that the backend answered through
// reverse_proxy (which sets {http.reverse_proxy.status_code}) is not a rejection in the chain:
// the request reached the backend and stays charged.
func TestBackendThrottleStaysCharged(t *testing.T) {
	h := unitHandler(t, "unit-backend-throttle", map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 10}})
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		proxied := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			repl.Set("http.reverse_proxy.status_code", status)
			w.WriteHeader(status)
			return nil
		})
		r := get("a")
		repl := caddy.NewReplacer()
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		_ = h.ServeHTTP(httptest.NewRecorder(), r, proxied)
	}
	if got := remainingAfter(t, h, "a"); got != "7" { // both charged; this GET takes 1
		t.Errorf("remaining %q after two backend throttles, want 7", got)
	}
}

// TestBackendAnswersAreSignals: under an adaptive capacity, a throttle status counts as a
// throttle only when the backend answered it through reverse_proxy; another handler's 503 is
// an answer, not a throttle; a 429 of a later limiter is rolled back and counts as nothing.
func TestBackendAnswersAreSignals(t *testing.T) {
	h := newTestHandler(t, &Handler{
		Cluster: "unit-signals", Key: "{http.request.header.X-App-Id}",
		Capacity: 1000, Adaptive: &AdaptiveConfig{},
		Apps: map[string]*AppConfig{"a": {Guaranteed: 100, Burst: 100}},
	})
	answer := func(status int, proxied bool) {
		r := get("a")
		repl := caddy.NewReplacer()
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		_ = h.ServeHTTP(httptest.NewRecorder(), r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			if proxied {
				repl.Set("http.reverse_proxy.status_code", status)
			}
			w.WriteHeader(status)
			return nil
		}))
	}
	answer(http.StatusServiceUnavailable, true)  // the backend throttles
	answer(http.StatusTooManyRequests, true)     // the backend throttles
	answer(http.StatusServiceUnavailable, false) // another handler's 503
	answer(http.StatusTooManyRequests, false)    // a later limiter: rolled back
	answer(http.StatusOK, true)
	app, _ := h.state.Limiter().App("a")
	if got := app.Signals(); got.Answers != 4 || got.Throttles != 2 || got.Latency.Count() != 4 {
		t.Errorf("signals %+v, want 4 answers of which 2 throttles", got)
	}
}

// TestHeaderModes: each mode writes exactly its own headers, on an admitted response and on
// a rejection; the default writes the draft fields on rejections only.
func TestHeaderModes(t *testing.T) {
	legacy := []string{"X-Ratelimit-Cost", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
	draft := []string{"Ratelimit-Policy", "Ratelimit"}
	all := append(append([]string{}, legacy...), draft...)
	for _, tc := range []struct {
		mode                     string
		admitted, rejected, lack []string // lack: on neither
	}{
		{"", nil, draft, legacy}, // the default
		{"rejections", nil, draft, legacy},
		{"draft", []string{"Ratelimit"}, draft, legacy},
		{"legacy", legacy, legacy, append([]string{"X-Ratelimit-Limit"}, draft...)},
		{"both", all, all, nil},
		{"off", nil, nil, append([]string{"Retry-After"}, all...)},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			h := newTestHandler(t, &Handler{
				Cluster: "unit-hdr-" + tc.mode,
				Key:     "{http.request.header.X-App-Id}",
				Apps:    map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 1}},
				Headers: tc.mode,
			})
			check := func(w *httptest.ResponseRecorder, has []string, status int) {
				t.Helper()
				if w.Code != status {
					t.Fatalf("status %d, want %d", w.Code, status)
				}
				for _, k := range all {
					if got, want := w.Header().Get(k) != "", slices.Contains(has, k); got != want {
						t.Errorf("status %d: %s present %v, want %v (%q)", status, k, got, want, w.Header().Get(k))
					}
				}
				for _, k := range tc.lack {
					if w.Header().Get(k) != "" && !slices.Contains(has, k) {
						t.Errorf("status %d: %s present: %q", status, k, w.Header().Get(k))
					}
				}
			}
			w := httptest.NewRecorder()
			_ = h.ServeHTTP(w, get("a"), nopNext)
			check(w, tc.admitted, 200)
			if w.Header().Get("Retry-After") != "" {
				t.Error("Retry-After on an admitted response")
			}
			w = httptest.NewRecorder()
			_ = h.ServeHTTP(w, get("a"), nopNext) // a rejection
			check(w, tc.rejected, 429)
			if tc.mode != "off" && w.Header().Get("Retry-After") == "" {
				t.Error("Retry-After missing on a rejection")
			}
		})
	}
}

// TestDefaultHeaders: by default an admitted response carries no rate-limit field; a rejection
// carries RateLimit, RateLimit-Policy and Retry-After; no X-RateLimit-* field is written.
func TestDefaultHeaders(t *testing.T) {
	h := newTestHandler(t, &Handler{
		Cluster: "unit-hdr-default",
		Key:     "{http.request.header.X-App-Id}",
		Apps:    map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 1}},
	})
	w := httptest.NewRecorder()
	_ = h.ServeHTTP(w, get("a"), nopNext)
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Cost", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		if v := w.Header().Get(k); v != "" {
			t.Errorf("%s %q on an admitted response", k, v)
		}
	}
	w = httptest.NewRecorder()
	_ = h.ServeHTTP(w, get("a"), nopNext)
	if w.Code != 429 {
		t.Fatalf("status %d", w.Code)
	}
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
		if w.Header().Get(k) == "" {
			t.Errorf("%s missing on a rejection", k)
		}
	}
	if v := w.Header().Get("X-RateLimit-Remaining"); v != "" {
		t.Errorf("X-RateLimit-Remaining %q by default", v)
	}
}

// TestPlaceholdersChain: with two rate_limit handlers on one request, the placeholders show
// the last one that decided, also through another handler's writer wrapper and when the first
// lets the request through in shadow mode; each request has its own values.
func TestPlaceholdersChain(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprintf("shadow=%v", shadow), func(t *testing.T) {
			first := newTestHandler(t, &Handler{
				Cluster: fmt.Sprintf("unit-chain-1-%v", shadow),
				Key:     "{http.request.header.X-App-Id}",
				Apps:    map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 1}},
				Shadow:  shadow,
			})
			second := newTestHandler(t, &Handler{
				Cluster: fmt.Sprintf("unit-chain-2-%v", shadow),
				Key:     "{http.request.header.X-App-Id}",
				Apps:    map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 100}},
			})
			chain := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				// another handler's wrapper between the two
				return second.ServeHTTP(&caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, r, nopNext)
			})
			serve := func() (*caddy.Replacer, int) {
				r := get("a")
				repl := caddyhttp.NewTestReplacer(r)
				w := httptest.NewRecorder()
				_ = first.ServeHTTP(w, r, chain)
				return repl, w.Code
			}
			placeholders := func(repl *caddy.Replacer) string {
				return repl.ReplaceAll("{http.rate_limit.app} {http.rate_limit.decision} "+
					"{http.rate_limit.reason} {http.rate_limit.remaining} {http.rate_limit.cost}", "-")
			}
			repl1, code := serve()
			if got := placeholders(repl1); code != 200 || got != "a allowed - 99 1" {
				t.Errorf("request 1: %d %q, want the second handler's: a allowed - 99 1", code, got)
			}
			repl2, code := serve() // the first handler's bucket is empty now
			want := "a rejected app_exhausted 0 1"
			if shadow {
				want = "a allowed - 98 1" // let through, and the second handler admitted it
			}
			if got := placeholders(repl2); got != want {
				t.Errorf("request 2: %d %q, want %q", code, got, want)
			}
			if got := placeholders(repl1); got != "a allowed - 99 1" {
				t.Errorf("request 1's placeholders changed to %q", got)
			}
		})
	}
}

// tokensOf returns app's local tokens and debt on h.
func tokensOf(t *testing.T, h *Handler, app string) (tokens, debt int64) {
	t.Helper()
	a, _ := h.state.Limiter().App(app)
	if a == nil {
		t.Fatalf("no app %q", app)
	}
	return a.Tokens()
}

// TestLargeBodyChargedAsItArrives: a body costing more than the app's burst is charged the
// burst up front and the rest as it is read; a declared size that never comes costs nothing
// beyond the burst while the request is in flight, and is settled to what was read.
func TestLargeBodyChargedAsItArrives(t *testing.T) {
	h := unitHandler(t, "unit-large", map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 10}})
	put := func(declared int64, body io.Reader) *http.Request {
		r := httptest.NewRequest("PUT", "http://gw.example/bucket/object", io.NopCloser(body))
		r.ContentLength = declared
		r.Header.Set("X-App-Id", "a")
		return r
	}
	// Honest: 16 quanta, cost 5 + 16 = 21 against a burst of 10.
	err := h.ServeHTTP(httptest.NewRecorder(), put(16*65536, strings.NewReader(strings.Repeat("x", 16*65536))),
		caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			if tok, debt := tokensOf(t, h, "a"); tok != 0 || debt != 0 {
				t.Errorf("before the body: tokens %d debt %d, want the burst charged: 0 and 0", tok, debt)
			}
			if _, err := io.CopyN(io.Discard, r.Body, 8*65536); err != nil {
				return err
			}
			if tok, debt := tokensOf(t, h, "a"); tok != 0 || debt != 3 { // 5 + 8 = 13 charged
				t.Errorf("after half the body: tokens %d debt %d, want 0 and 3", tok, debt)
			}
			_, err := io.Copy(io.Discard, r.Body)
			return err
		}))
	if err != nil {
		t.Fatal(err)
	}
	if tok, debt := tokensOf(t, h, "a"); tok != 0 || debt != 11 {
		t.Errorf("after the request: tokens %d debt %d, want 0 and 11 (21 - 10)", tok, debt)
	}

	// A lie: Content-Length 10^9 (cost 5 + 15 259), 5 bytes sent, on a fresh handler.
	h = unitHandler(t, "unit-lie", map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 10}})
	w := httptest.NewRecorder()
	r := put(1e9, strings.NewReader("hello"))
	repl := caddyhttp.NewTestReplacer(r)
	err = h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(io.Discard, r.Body)
		if tok, debt := tokensOf(t, h, "a"); tok != 0 || debt != 0 {
			t.Errorf("while in flight: tokens %d debt %d, want 0 and 0 (only the burst charged)", tok, debt)
		}
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Header().Get("X-RateLimit-Cost"); got != "15264" {
		t.Errorf("estimated cost %q, want 15264", got)
	}
	if tok, debt := tokensOf(t, h, "a"); tok != 4 || debt != 0 { // settled to 5 + 1 = 6
		t.Errorf("after the request: tokens %d debt %d, want 4 and 0", tok, debt)
	}
	// Access logs are written after the chain: the placeholder shows the settled cost.
	if got := repl.ReplaceAll("{http.rate_limit.cost}", "-"); got != "6" {
		t.Errorf("{http.rate_limit.cost} after the request = %q, want the settled 6", got)
	}
}

// TestTinyRateWaitsDoNotOverflow: an app refilling one token per 300 years (guaranteed 1e-10)
// or slower is told to wait a year at most, never "1 s": the waits used to overflow
// time.Duration and int64 into negative values, shown as 1. Every time a header shows (reset,
// window, retry-after), admitted or rejected, is capped at the same year.
func TestTinyRateWaitsDoNotOverflow(t *testing.T) {
	const year = "31536000"
	for _, g := range []float64{1e-10, 1e-20, 5e-324} {
		t.Run(fmt.Sprint(g), func(t *testing.T) {
			h := unitHandler(t, fmt.Sprintf("unit-tiny-%v", g), map[string]*AppConfig{"a": {Guaranteed: g, Burst: 1}}) // headers both
			w := httptest.NewRecorder()
			if h.ServeHTTP(w, get("a"), nopNext) != nil || w.Code != 200 {
				t.Fatalf("first request: %d", w.Code)
			}
			if got := w.Header().Get("RateLimit"); !strings.HasSuffix(got, ";t="+year) {
				t.Errorf("admitted: RateLimit %q, want t=%s", got, year)
			}
			w = httptest.NewRecorder()
			if err := h.ServeHTTP(w, get("a"), nopNext); err != nil || w.Code != http.StatusTooManyRequests {
				t.Fatalf("second request: %d %v", w.Code, err)
			}
			if got := w.Header().Get("Retry-After"); got != year {
				t.Errorf("Retry-After %q, want a year, %s", got, year)
			}
			if policy := w.Header().Get("RateLimit-Policy"); !strings.HasSuffix(policy, ";w="+year) {
				t.Errorf("RateLimit-Policy %q, want w=%s", policy, year)
			}
		})
	}
}

// TestDisabledAppRefused: a disabled app is refused with 403 app_disabled before it takes an
// in-flight slot or a token, with no Retry-After (waiting does not cure it), and counted.
func TestDisabledAppRefused(t *testing.T) {
	h := unitHandler(t, "unit-disabled", map[string]*AppConfig{"a": {Guaranteed: 1000, Burst: 1000, MaxConnections: 1, Disabled: true}})
	w := httptest.NewRecorder()
	called := false
	if err := h.ServeHTTP(w, get("a"), caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		called = true
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	if called || w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), `"reason":"app_disabled"`) {
		t.Fatalf("disabled app: next called %v, %d %s", called, w.Code, w.Body)
	}
	if ra := w.Header().Get("Retry-After"); ra != "" {
		t.Errorf("Retry-After %q on a disabled app", ra)
	}
	st := h.state.Limiter().Stats()[0]
	if n := connCurrent(h, "a"); n != 0 || st.Label != "a" || st.Requests[store.ReasonAppDisabled] != 1 || st.Requests[store.ReasonNone] != 0 {
		t.Errorf("in flight %d, %s counted %v", n, st.Label, st.Requests)
	}
}
