package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// adminSite: alpha has burst 3 and almost no refill, so its 4th request is rejected; beta has
// a warm-up and takes no traffic; unknown apps are rejected.
const adminSite = `	rate_limit {
		cluster e2e-admin
		key {http.request.header.X-App-Id}
		unknown_app reject
		capacity 1000
		app alpha {
			guaranteed 0.01
			burst 3
			priority 1
			max_connections 7
		}
		app beta {
			guaranteed 20
			burst 40
			max_borrow 10
			warmup 30s
		}
	}
	respond "ok"`

// adminJSON GETs the admin endpoint's path and decodes the JSON answer into v; it returns the
// status and the raw body.
func (g *gateway) adminJSON(method, path string, v any) (int, http.Header, string) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.admin+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	body := drain(resp)
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal([]byte(body), v); err != nil {
			g.t.Fatalf("%s %s: %q: %v", method, path, body, err)
		}
	}
	return resp.StatusCode, resp.Header, body
}

// TestAdminAPI: the admin.api.rate_limit module in a real Caddy. After admitted and rejected
// requests, GET /rate_limit/ and /rate_limit/apps show the counts and the configured policy;
// the other routes answer; a POST is 405 with Allow and Caddy's JSON error body.
func TestAdminAPI(t *testing.T) {
	g := startGateway(t, "admin", adminSite)
	for i := 0; i < 5; i++ {
		want := 200
		if i >= 3 {
			want = 429
		}
		if r := g.send("GET", "/bucket/key", "alpha", ""); r.status != want {
			t.Fatalf("alpha request %d: %d %q, want %d", i+1, r.status, r.body, want)
		}
	}
	if r := g.send("GET", "/bucket/key", "stranger", ""); r.status != 403 {
		t.Fatalf("unknown app: %d %q", r.status, r.body)
	}

	type app struct {
		ID     string `json:"id"`
		Source string `json:"source"`
		Policy *struct {
			Guaranteed     float64 `json:"guaranteed"`
			Burst          float64 `json:"burst"`
			Priority       int     `json:"priority"`
			MaxBorrow      float64 `json:"max_borrow"`
			MaxConnections int64   `json:"max_connections"`
			Warmup         string  `json:"warmup"`
		} `json:"policy"`
		Requests struct {
			Allowed  int64            `json:"allowed"`
			Rejected int64            `json:"rejected"`
			Reasons  map[string]int64 `json:"reasons"`
		} `json:"requests"`
		Cost        int64 `json:"cost"`
		LocalTokens int64 `json:"local_tokens"`
		Leases      int64 `json:"leases"`
		LeaseTokens int64 `json:"lease_tokens"`
		InFlight    int64 `json:"in_flight"`
		Peak        int64 `json:"peak"`
	}
	var apps struct {
		Cluster string `json:"cluster"`
		Apps    []app  `json:"apps"`
	}
	// A request's decision is recorded when the handler returns, which may be just after the
	// client has its answer: poll until all five are counted.
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, _, body := g.adminJSON("GET", "/rate_limit/apps", &apps)
		if status != 200 {
			t.Fatalf("GET /rate_limit/apps: %d %s", status, body)
		}
		if len(apps.Apps) > 0 && apps.Apps[0].Requests.Allowed+apps.Apps[0].Requests.Rejected == 5 {
			t.Logf("GET /rate_limit/apps: %s", body)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /rate_limit/apps: %s, want alpha's 5 requests", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if apps.Cluster != "e2e-admin" || len(apps.Apps) != 3 || apps.Apps[0].ID != "alpha" || apps.Apps[1].ID != "beta" || apps.Apps[2].ID != "*" {
		t.Fatalf("apps %+v", apps)
	}
	alpha, beta, star := apps.Apps[0], apps.Apps[1], apps.Apps[2]
	if p := alpha.Policy; p == nil || p.Guaranteed != 0.01 || p.Burst != 3 || p.Priority != 1 || p.MaxConnections != 7 || p.Warmup != "0s" {
		t.Errorf("alpha policy %+v", alpha.Policy)
	}
	if alpha.Source != "caddyfile" || alpha.Requests.Allowed != 3 || alpha.Requests.Rejected != 2 ||
		alpha.Requests.Reasons["app_exhausted"] != 2 || alpha.Cost != 3 || alpha.LeaseTokens != 3 || alpha.Leases == 0 ||
		alpha.LocalTokens != 0 || alpha.InFlight != 0 || alpha.Peak != 1 {
		t.Errorf("alpha %+v", alpha)
	}
	if p := beta.Policy; p == nil || p.Guaranteed != 20 || p.Burst != 40 || p.Priority != 0 || p.MaxBorrow != 10 ||
		p.MaxConnections != 1000 || p.Warmup != "30s" {
		t.Errorf("beta policy %+v (max_connections: the connections.app default)", beta.Policy)
	}
	if star.Policy != nil || star.Requests.Reasons["unknown_app"] != 1 {
		t.Errorf("* (unknown_app reject) %+v", star)
	}

	var one app
	if status, _, body := g.adminJSON("GET", "/rate_limit/apps/alpha", &one); status != 200 || one.ID != "alpha" || one.Requests.Allowed != 3 {
		t.Errorf("GET /rate_limit/apps/alpha: %d %s", status, body)
	}
	if status, _, body := g.adminJSON("GET", "/rate_limit/apps/nobody", nil); status != 404 ||
		!strings.Contains(body, `"error":"unknown app \"nobody\" in cluster \"e2e-admin\"`) {
		t.Errorf("GET /rate_limit/apps/nobody: %d %s", status, body)
	}

	var overview struct {
		Cluster     string `json:"cluster"`
		Instance    string `json:"instance"`
		Store       string `json:"store"`
		Capacity    float64
		Degradation struct {
			Name   string `json:"name"`
			Number int    `json:"number"`
		} `json:"degradation_level"`
		Factors       []float64 `json:"factors"`
		Emergency     struct{ Active bool }
		LiveInstances int     `json:"live_instances"`
		LocalHitRatio float64 `json:"local_hit_ratio"`
		Leases        int64   `json:"leases"`
		LeaseTokens   int64   `json:"lease_tokens"`
		StoreLatency  float64 `json:"store_latency_seconds"`
	}
	// The overview's lease figures are the history's last reading (taken once a second): wait
	// for the reading that has alpha's leases.
	var status int
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; {
		status, _, body = g.adminJSON("GET", "/rate_limit/", &overview)
		if status != 200 || overview.Leases >= alpha.Leases || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("GET /rate_limit/: %s", body)
	if status != 200 || overview.Cluster != "e2e-admin" || overview.Store != "memory" || overview.Capacity != 1000 ||
		!strings.Contains(overview.Instance, fmt.Sprintf("-%d-", g.pid())) ||
		overview.Degradation.Name != "normal" || overview.Degradation.Number != 0 || len(overview.Factors) != 4 ||
		overview.Emergency.Active || overview.LiveInstances != 1 || overview.Leases < alpha.Leases ||
		overview.LeaseTokens < 3 || overview.LocalHitRatio < 0 || overview.LocalHitRatio > 1 || overview.StoreLatency < 0 {
		t.Errorf("GET /rate_limit/: %d %+v", status, overview)
	}

	for _, path := range []string{"/rate_limit/connections", "/rate_limit/emergency"} {
		status, _, body := g.adminJSON("GET", path, nil)
		t.Logf("GET %s: %s", path, body)
		if status != 200 {
			t.Errorf("GET %s: %d %s", path, status, body)
		}
	}
	if status, _, body := g.adminJSON("GET", "/rate_limit/emergency", nil); strings.TrimSpace(body) !=
		`{"active":false,"source":"","reason":"","until":null}` {
		t.Errorf("GET /rate_limit/emergency: %d %s", status, body)
	}
	if status, _, body := g.adminJSON("GET", "/rate_limit/?cluster=nope", nil); status != 404 ||
		!strings.Contains(body, `unknown cluster \"nope\"`) {
		t.Errorf("GET ?cluster=nope: %d %s", status, body)
	}

	status, hdr, body := g.adminJSON("POST", "/rate_limit/apps", nil)
	var e struct {
		Error string `json:"error"`
	}
	if status != 405 || hdr.Get("Allow") != "GET" || json.Unmarshal([]byte(body), &e) != nil ||
		!strings.Contains(e.Error, "method POST not allowed") {
		t.Errorf("POST /rate_limit/apps: %d Allow %q %s", status, hdr.Get("Allow"), body)
	}
}
