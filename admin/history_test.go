package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/limiter"
)

var t0 = time.Unix(1_800_000_000, 0)

// recordTraffic takes alpha's 7 requests (5 admitted, 2 rejected) between two readings.
func recordTraffic(t *testing.T, c *testCluster) {
	t.Helper()
	c.hist.Record(t0, Read(c))
	take(t, c, "alpha", 7)
	c.hist.Record(t0.Add(time.Second), Read(c))
}

// TestHistory: GET /rate_limit/history has the cluster's samples and the busiest apps' series,
// counts per second; ?app= names the apps (unknown ones are left out); ?seconds= cuts the window.
func TestHistory(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	recordTraffic(t, c)
	var v HistoryView
	get(t, apiWith(c), "/rate_limit/history", &v)
	if v.Cluster != "c1" || v.Interval != 1 || len(v.Samples) != 2 {
		t.Fatalf("history %+v", v)
	}
	s := v.Samples[1]
	if s.T != t0.Unix()+1 || s.Allowed != 5 || s.Rejected != 2 || s.Reasons["app_exhausted"] != 2 || s.Cost != 5 ||
		s.ConnectionLimit != 100 || s.LiveInstances != 1 {
		t.Errorf("second sample %+v", s)
	}
	if v.Samples[0].Allowed != 0 {
		t.Errorf("first sample %+v, want no decisions", v.Samples[0])
	}
	alpha := v.Apps["alpha"]
	if len(v.Apps) != 3 || len(alpha) != 2 || alpha[1].Allowed != 5 || alpha[1].Rejected != 2 || alpha[1].Burst != 5 || alpha[1].Limit != 3 {
		t.Errorf("apps %+v", v.Apps)
	}

	v = HistoryView{}
	get(t, apiWith(c), "/rate_limit/history?seconds=1&app=alpha&app=nope", &v)
	if len(v.Samples) != 1 || v.Samples[0].T != t0.Unix()+1 || len(v.Apps) != 1 || len(v.Apps["alpha"]) != 1 {
		t.Errorf("seconds=1&app=alpha&app=nope: %+v", v)
	}
	for _, bad := range []string{"0", "901", "x", "", "1.5", "%2B5", "10&seconds=20"} {
		_, err := call(apiWith(c), http.MethodGet, "/rate_limit/history?seconds="+bad)
		if msg := apiErr(t, err, http.StatusBadRequest); !strings.HasPrefix(msg, "seconds: ") {
			t.Errorf("seconds=%s: %q", bad, msg)
		}
	}
	for _, bad := range []string{"bad!id", ""} {
		_, err := call(apiWith(c), http.MethodGet, "/rate_limit/history?seconds=1&app="+bad)
		if msg := apiErr(t, err, http.StatusBadRequest); !strings.HasPrefix(msg, "invalid app id") {
			t.Errorf("app=%s: %q", bad, msg)
		}
	}
	noHist := *c
	noHist.hist = nil
	_, err := call(apiWith(&noHist), http.MethodGet, "/rate_limit/history")
	apiErr(t, err, http.StatusNotFound)
	for _, route := range []string{"/rate_limit/history", "/rate_limit/stream"} {
		w, err := call(apiWith(c), http.MethodPost, route)
		apiErr(t, err, http.StatusMethodNotAllowed)
		if w.Header().Get("Allow") != "GET" {
			t.Errorf("POST %s: Allow %q", route, w.Header().Get("Allow"))
		}
	}
}

// streamServer serves the module over HTTP, as Caddy's admin endpoint does; served gets one
// value each time a request's handler has returned.
func streamServer(t *testing.T, a API) (srv *httptest.Server, served chan struct{}) {
	served = make(chan struct{}, 8)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { served <- struct{}{} }()
		if err := a.Routes()[0].Handler.ServeHTTP(w, r); err != nil {
			status := http.StatusInternalServerError
			var ae caddy.APIError
			if errors.As(err, &ae) {
				status = ae.HTTPStatus
			}
			http.Error(w, err.Error(), status)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, served
}

// readEvent reads one server-sent event: its name and data.
func readEvent(t *testing.T, br *bufio.Reader) (name string, data []byte) {
	t.Helper()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = []byte(strings.TrimPrefix(line, "data: "))
		}
	}
}

// TestStream: the stream sends the newest sample at once, then each new one; it ends with
// the client and frees its place.
func TestStream(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	recordTraffic(t, c)
	a := apiWith(c)
	srv, served := streamServer(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/rate_limit/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	var ev StreamEvent
	name, data := readEvent(t, br)
	if err := json.Unmarshal(data, &ev); err != nil || name != "snapshot" {
		t.Fatalf("first event %q %s: %v", name, data, err)
	}
	if ev.Cluster != "c1" || ev.Sample.T != t0.Unix()+1 || ev.Sample.Allowed != 5 || ev.Apps["alpha"].Rejected != 2 {
		t.Errorf("first event %+v", ev)
	}
	take(t, c, "alpha", 1) // rejected: alpha's burst is spent
	c.hist.Record(t0.Add(2*time.Second), Read(c))
	_, data = readEvent(t, br)
	if err := json.Unmarshal(data, &ev); err != nil || ev.Sample.T != t0.Unix()+2 || ev.Sample.Rejected != 1 || ev.Sample.Allowed != 0 {
		t.Errorf("second event %s: %v", data, err)
	}
	if n := streams.Load(); n != 1 {
		t.Errorf("%d open streams, want 1", n)
	}
	cancel()
	select { // the handler notices the client left and returns
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end with its client")
	}
	if n := streams.Load(); n != 0 {
		t.Errorf("%d open streams after the client left, want 0", n)
	}
}

// TestStreamEndsWithItsConfig: an open stream ends when the config its API belongs to is
// unloaded (a reload, a shutdown), so that Caddy's stop of that config's admin server does not
// wait for it.
func TestStreamEndsWithItsConfig(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	recordTraffic(t, c)
	a := apiWith(c)
	cfgCtx, unload := context.WithCancel(context.Background())
	defer unload()
	a.ctx = caddy.Context{Context: cfgCtx}
	srv, served := streamServer(t, a)
	resp, err := http.Get(srv.URL + "/rate_limit/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if name, _ := readEvent(t, br); name != "snapshot" {
		t.Fatalf("first event %q", name)
	}
	unload()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived its config")
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("the stream did not end cleanly: %v", err)
	}
}

// TestStreamBound: a stream beyond MaxStreams is 503.
func TestStreamBound(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	streams.Add(MaxStreams)
	defer streams.Add(-MaxStreams)
	_, err := call(apiWith(c), http.MethodGet, "/rate_limit/stream")
	if msg := apiErr(t, err, http.StatusServiceUnavailable); !strings.Contains(msg, "too many open streams") {
		t.Errorf("503 message %q", msg)
	}
	if n := streams.Load(); n != MaxStreams {
		t.Errorf("refused stream left the count at %d", n)
	}
}

// Read shows every app as GET /rate_limit/apps/<id> does (configured apps, "*", the active
// isolated tenants), without building its views (it runs every second, for every app).
func TestReadMatchesAppViews(t *testing.T) {
	cfg := testConfig()
	cfg.UnknownApp = limiter.UnknownIsolated
	c := newCluster(t, "c1", cfg, nil)
	take(t, c, "alpha", 7)
	take(t, c, "tenant", 2)
	rd := Read(c)
	if len(rd.Apps) != 4 {
		t.Fatalf("%d apps read, want alpha, beta, * and the tenant", len(rd.Apps))
	}
	for _, a := range rd.Apps {
		v, err := appView(c, a.ID)
		if err != nil {
			t.Fatalf("read %s, not shown: %v", a.ID, err)
		}
		want := [7]float64{float64(v.Requests.Allowed), float64(v.Cost), float64(v.LocalTokens), float64(v.InFlight), v.Borrowed, v.Debt, float64(v.LocalHits)}
		got := [7]float64{float64(a.Requests[0]), float64(a.Cost), float64(a.LocalTokens), float64(a.InFlight), a.Borrowed, a.Debt, float64(a.LocalHits)}
		if got != want {
			t.Errorf("app %s: read %v, shown %v", a.ID, got, want)
		}
		var limit int64
		var guaranteed, burst float64
		if v.Policy != nil {
			limit, guaranteed, burst = v.Policy.MaxConnections, v.Policy.Guaranteed, v.Policy.Burst
		}
		if a.Limit != limit || a.Guaranteed != guaranteed || a.Burst != burst {
			t.Errorf("app %s: read policy %d %v %v, shown %d %v %v", v.ID, a.Limit, a.Guaranteed, a.Burst, limit, guaranteed, burst)
		}
	}
	if rd.Requests[0] != 7 {
		t.Errorf("cluster admitted %d, want 7 (alpha 5, the tenant 2, counted once)", rd.Requests[0])
	}
}
