package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// memorySite is the site of TestEndToEndMemoryStore; burst is what the reload changes.
func memorySite(backend string, burst int) string {
	return fmt.Sprintf(`	rate_limit {
		headers both
		cluster e2e
		key {http.request.header.X-App-Id}
		unknown_app reject
		app alpha {
			guaranteed 0.01
			burst %d
		}
		app beta {
			guaranteed 0.01
			burst 100
		}
	}
	handle /upload/* {
		reverse_proxy %s
	}
	respond "{http.rate_limit.remaining}"`, burst, backend)
}

// readingBackend is an upstream that reads the whole request body and answers "read <n>".
func readingBackend(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read %d", n)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

type reply struct {
	status int
	header http.Header
	body   string
}

// send makes one request for app to the gateway.
func (g *gateway) send(method, path, app, body string) reply {
	g.t.Helper()
	req, err := http.NewRequest(method, g.base+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("X-App-Id", app)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// TestEndToEndMemoryStore: the real binary on the embedded store. Burst then 429 with the JSON
// body; a cost-weighted PUT through a proxy; then `caddy reload` with a changed policy keeps
// the bucket (the remaining count continues instead of starting from a full bucket again).
func TestEndToEndMemoryStore(t *testing.T) {
	backend := readingBackend(t)
	g := startGateway(t, "memory", memorySite(backend, 10))

	for i := 0; i < 4; i++ {
		r := g.send("GET", "/bucket/key", "alpha", "")
		if r.status != 200 || r.body != strconv.Itoa(9-i) {
			t.Fatalf("request %d: %d %q, want 200 remaining %d", i+1, r.status, r.body, 9-i)
		}
	}
	if r := g.send("GET", "/bucket/key", "stranger", ""); r.status != 403 || !strings.Contains(r.body, `"reason":"unknown_app"`) {
		t.Errorf("unknown app: %d %q", r.status, r.body)
	}
	if r := g.send("GET", "/bucket/key", "", ""); r.status != 400 || !strings.Contains(r.body, `"reason":"invalid_app_id"`) {
		t.Errorf("missing app id: %d %q", r.status, r.body)
	}

	// cost-weighted PUT: 5 + ceil(200 KiB / 64 KiB) = 9, the body read by the backend
	r := g.send("PUT", "/upload/bucket/object", "beta", strings.Repeat("x", 200*1024))
	if r.status != 200 || r.body != "read 204800" || r.header.Get("X-RateLimit-Cost") != "9" ||
		r.header.Get("X-RateLimit-Remaining") != "91" {
		t.Errorf("PUT: %d %q cost %q remaining %q", r.status, r.body, r.header.Get("X-RateLimit-Cost"),
			r.header.Get("X-RateLimit-Remaining"))
	}

	// reload with a changed policy (burst 10 -> 12): 6 tokens were left and stay left
	g.reload(memorySite(backend, 12))
	r = g.send("GET", "/bucket/key", "alpha", "")
	if r.status != 200 || r.body != "5" {
		t.Fatalf("after reload: %d %q, want remaining 5 (state kept)", r.status, r.body)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"app";q=12;w=1200` {
		t.Errorf("new policy not applied: RateLimit-Policy %q", got)
	}
	for i := 0; i < 5; i++ {
		if r := g.send("GET", "/bucket/key", "alpha", ""); r.status != 200 {
			t.Fatalf("request %d after reload: %d %q", i+1, r.status, r.body)
		}
	}
	r = g.send("GET", "/bucket/key", "alpha", "")
	if r.status != 429 {
		t.Fatalf("after the burst: %d %q, want 429", r.status, r.body)
	}
	var rej struct {
		Error      string `json:"error"`
		Reason     string `json:"reason"`
		RetryAfter int64  `json:"retry_after"`
		Remaining  int64  `json:"remaining"`
		Cost       int64  `json:"cost"`
	}
	if err := json.Unmarshal([]byte(r.body), &rej); err != nil || rej.Error != "rate_limit_exceeded" ||
		rej.Reason != "app_exhausted" || rej.RetryAfter < 1 || rej.Cost != 1 {
		t.Errorf("rejection body %q (%v)", r.body, err)
	}
	if r.header.Get("Content-Type") != "application/json" || r.header.Get("Retry-After") == "" {
		t.Errorf("rejection headers %v", r.header)
	}

	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"caddy_rate_limit_requests_total", []string{`app="alpha"`, `cluster="e2e"`, `decision="allowed"`}, 10},
		{"caddy_rate_limit_requests_total", []string{`app="alpha"`, `decision="rejected"`, `reason="app_exhausted"`}, 1},
		{"caddy_rate_limit_requests_total", []string{`app="*"`, `decision="rejected"`, `reason="unknown_app"`}, 1},
		{"caddy_rate_limit_cost_total", []string{`app="beta"`, `cluster="e2e"`}, 9},
	} {
		v, ok, err := g.metric(m.name, m.labels...)
		if err != nil || !ok || v != m.want {
			t.Errorf("%s%v = %v (found %v, %v), want %v", m.name, m.labels, v, ok, err, m.want)
		}
	}
}
