package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// testCluster is a Cluster of real parts: a limiter.Limiter on a MemoryStore and a
// connlimit.Counter.
type testCluster struct {
	id, store       string
	lim             *limiter.Limiter
	conns           *connlimit.Counter
	hist            *history.Recorder
	invalid, unknow int64
}

func (c *testCluster) ID() string                      { return c.id }
func (c *testCluster) Store() string                   { return c.store }
func (c *testCluster) Limiter() *limiter.Limiter       { return c.lim }
func (c *testCluster) Connections() *connlimit.Counter { return c.conns }
func (c *testCluster) History() *history.Recorder      { return c.hist }
func (c *testCluster) PreAppRejections() (int64, int64) {
	return c.invalid, c.unknow
}

// testConfig: alpha has a tiny refill (0.01/s) and burst 5, so the 6th request is rejected;
// beta has a warm-up and the connections default; unknown apps share "*".
func testConfig() limiter.Config {
	return limiter.Config{
		Apps: map[string]store.AppPolicy{
			"alpha": {Guaranteed: 0.01, Burst: 5, Priority: 1, MaxConnections: 3},
			"beta":  {Guaranteed: 100, Burst: 200, MaxBorrow: 50, Warmup: 90 * time.Second},
		},
		Default: store.AppPolicy{Guaranteed: 100, Burst: 200, Priority: 3},
	}
}

// newCluster builds a cluster on store (nil: a fresh MemoryStore), closed at cleanup.
func newCluster(t testing.TB, id string, cfg limiter.Config, shared store.Store) *testCluster {
	t.Helper()
	conns := connlimit.New(connlimit.Config{App: 40, Cluster: 100}, nil)
	if shared == nil {
		shared = memstore.New(nil)
	}
	cfg.Cluster.ID = id
	cfg.Connections = conns
	lim, err := limiter.New(cfg, shared)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = lim.Close()
		conns.Close()
	})
	return &testCluster{id: id, store: "memory", lim: lim, conns: conns, hist: history.New()}
}

// take makes n requests of cost 1 for app and records their decisions as the handler does.
func take(t *testing.T, c *testCluster, app string, n int) (allowed, rejected int) {
	t.Helper()
	a, r := c.lim.App(app)
	if a == nil {
		t.Fatalf("app %q: %v", app, r)
	}
	for range n {
		d := a.Take(context.Background(), 1, 0)
		a.Record(d.Reason, 1)
		if d.Allowed {
			allowed++
		} else {
			rejected++
		}
	}
	return allowed, rejected
}

func apiWith(clusters ...Cluster) API {
	return API{source: func() []Cluster { return clusters }}
}

// call runs the module's route for method and target and returns the recorder and the error
// the handler returned (Caddy's admin endpoint renders it).
func call(a API, method, target string) (*httptest.ResponseRecorder, error) {
	routes := a.Routes()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, nil)
	for _, rt := range routes {
		if strings.HasPrefix(r.URL.Path, rt.Pattern) {
			return w, rt.Handler.ServeHTTP(w, r)
		}
	}
	return w, errors.New("no route")
}

// get decodes the JSON answer of a GET into v.
func get(t *testing.T, a API, target string, v any) {
	t.Helper()
	w, err := call(a, http.MethodGet, target)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", target, ct)
	}
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("GET %s: decoding %q: %v", target, w.Body.String(), err)
	}
}

// apiErr checks that err is a caddy.APIError with status and returns the body Caddy's admin
// endpoint writes for it ({"error": "..."}).
func apiErr(t *testing.T, err error, status int) string {
	t.Helper()
	var ae caddy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T), want a caddy.APIError", err, err)
	}
	if ae.HTTPStatus != status {
		t.Fatalf("status %d (%v), want %d", ae.HTTPStatus, ae.Err, status)
	}
	if ae.Message == "" && ae.Err != nil {
		ae.Message = ae.Err.Error() // as Caddy's handleError does
	}
	b, err := json.Marshal(ae)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil || len(body) != 1 || body["error"] == "" {
		t.Fatalf("error body %s", b)
	}
	return body["error"].(string)
}

// TestModuleRegistered: the module is registered under admin.api.rate_limit and is an
// AdminRouter serving the /rate_limit/ subtree from its source of clusters.
func TestModuleRegistered(t *testing.T) {
	info, err := caddy.GetModule("admin.api.rate_limit")
	if err != nil {
		t.Fatal(err)
	}
	router, ok := info.New().(caddy.AdminRouter)
	if !ok {
		t.Fatalf("%T is not a caddy.AdminRouter", info.New())
	}
	routes := router.Routes()
	if len(routes) != 1 || routes[0].Pattern != "/rate_limit/" {
		t.Fatalf("routes %+v", routes)
	}

	c := newCluster(t, "installed", testConfig(), nil)
	api := router.(*API)
	api.source = func() []Cluster { return []Cluster{c} }
	var v ClusterView
	get(t, *api, "/rate_limit/", &v)
	if v.Cluster != "installed" {
		t.Errorf("cluster %q, want the source's", v.Cluster)
	}
	// the process's own clusters: none in this test binary
	_, err = call(API{}, http.MethodGet, "/rate_limit/")
	if msg := apiErr(t, err, http.StatusNotFound); !strings.Contains(msg, "no rate_limit cluster") {
		t.Errorf("without a source: %q", msg)
	}
}

// TestOverview: GET /rate_limit/ shows the cluster's state and its totals.
func TestOverview(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	if a, r := take(t, c, "alpha", 7); a != 5 || r != 2 {
		t.Fatalf("alpha: %d admitted, %d rejected; want 5 and 2", a, r)
	}
	take(t, c, "stranger", 10)
	var v ClusterView
	get(t, apiWith(c), "/rate_limit/", &v)
	cfg := c.lim.Config()
	want := ClusterView{
		Cluster:       "c1",
		Instance:      cfg.Instance,
		Store:         "memory",
		UnknownApp:    "shared",
		Degradation:   LevelView{Name: "normal", Number: 0},
		Factors:       []float64{1, 1, 1, 1},
		LiveInstances: 1,
	}
	got := v
	got.Leases, got.LeaseTokens, got.LocalHitRatio, got.StoreLatency = 0, 0, 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("overview\n got %+v\nwant %+v", got, want)
	}
	var leases, tokens, hits int64
	for _, s := range c.lim.Stats() {
		leases, tokens, hits = leases+s.Leases, tokens+s.LeaseTokens, hits+s.LocalHits
	}
	if v.Leases != leases || v.LeaseTokens != tokens || leases == 0 || tokens < 5 {
		t.Errorf("leases %d tokens %d, want %d and %d (> 0)", v.Leases, v.LeaseTokens, leases, tokens)
	}
	if wantRatio := float64(hits) / 15; v.LocalHitRatio != wantRatio || v.LocalHitRatio <= 0 || v.LocalHitRatio > 1 {
		t.Errorf("local_hit_ratio %v, want %v (hits %d of 15 admitted)", v.LocalHitRatio, wantRatio, hits)
	}
	if v.StoreLatency < 0 || v.StoreLatency > 1 {
		t.Errorf("store_latency_seconds %v", v.StoreLatency)
	}
	if v.Emergency.Active || v.Emergency.Until != nil || v.Emergency.Source != "" {
		t.Errorf("emergency %+v, want inactive", v.Emergency)
	}
}

// TestApps: GET /rate_limit/apps lists the configured apps with their effective policies and
// figures, then "*" with the decisions taken before there is an app.
func TestApps(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	c.invalid, c.unknow = 2, 0
	take(t, c, "alpha", 7)
	take(t, c, "stranger", 3) // the shared "*" bucket
	var tickets []*connlimit.Ticket
	for range 3 {
		tk, r := c.conns.Acquire("alpha", 3)
		if tk == nil {
			t.Fatalf("acquire: %v", r)
		}
		tickets = append(tickets, tk)
	}
	if tk, r := c.conns.Acquire("alpha", 3); tk != nil || r != store.ReasonAppLimitExceeded {
		t.Fatalf("4th acquire: %v %v", tk, r)
	}
	tickets[0].Release()
	tickets[1].Release()
	t.Cleanup(tickets[2].Release)

	var v AppsView
	get(t, apiWith(c), "/rate_limit/apps", &v)
	if v.Cluster != "c1" || len(v.Apps) != 3 || v.Apps[0].ID != "alpha" || v.Apps[1].ID != "beta" || v.Apps[2].ID != "*" {
		t.Fatalf("apps %+v", v)
	}
	alpha, beta, star := v.Apps[0], v.Apps[1], v.Apps[2]
	if want := (PolicyView{Guaranteed: 0.01, Burst: 5, Priority: 1, MaxConnections: 3, Warmup: "0s", Enabled: true}); alpha.Policy == nil || *alpha.Policy != want {
		t.Errorf("alpha policy %+v, want %+v", alpha.Policy, want)
	}
	if want := (PolicyView{Guaranteed: 100, Burst: 200, MaxBorrow: 50, MaxConnections: 40, Warmup: "1m30s", Enabled: true}); beta.Policy == nil || *beta.Policy != want {
		t.Errorf("beta policy %+v, want %+v (max_connections: connections.app)", beta.Policy, want)
	}
	if want := (PolicyView{Guaranteed: 100, Burst: 200, Priority: 3, MaxConnections: 40, Warmup: "0s", Enabled: true}); star.Policy == nil || *star.Policy != want {
		t.Errorf("* policy %+v, want %+v", star.Policy, want)
	}
	wantReq := RequestsView{Allowed: 5, Rejected: 2, Reasons: map[string]int64{"app_exhausted": 2}}
	if !reflect.DeepEqual(alpha.Requests, wantReq) || alpha.Cost != 5 || alpha.Source != "caddyfile" {
		t.Errorf("alpha requests %+v cost %d source %q, want %+v cost 5", alpha.Requests, alpha.Cost, alpha.Source, wantReq)
	}
	if alpha.InFlight != 1 || alpha.Peak != 3 || alpha.ConnectionsRejected != 1 || alpha.Leaked != 0 {
		t.Errorf("alpha connections: in_flight %d peak %d rejected %d leaked %d, want 1 3 1 0",
			alpha.InFlight, alpha.Peak, alpha.ConnectionsRejected, alpha.Leaked)
	}
	if alpha.Leases == 0 || alpha.LeaseTokens != 5 || alpha.LocalTokens != 0 || alpha.LocalDebt != 0 {
		t.Errorf("alpha leases %d lease_tokens %d local_tokens %d local_debt %d, want >0 5 0 0",
			alpha.Leases, alpha.LeaseTokens, alpha.LocalTokens, alpha.LocalDebt)
	}
	wantStar := RequestsView{Allowed: 3, Rejected: 2, Reasons: map[string]int64{"invalid_app_id": 2}}
	if !reflect.DeepEqual(star.Requests, wantStar) || star.Cost != 3 {
		t.Errorf("* requests %+v cost %d, want %+v cost 3", star.Requests, star.Cost, wantStar)
	}
	if beta.Requests.Allowed != 0 || len(beta.Requests.Reasons) != 0 || beta.Leases != 0 {
		t.Errorf("beta (no traffic) %+v", beta)
	}

	// local debt: a charge above the local tokens
	a, _ := c.lim.App("alpha")
	a.Charge(4)
	var one AppView
	get(t, apiWith(c), "/rate_limit/apps/alpha", &one)
	if one.ID != "alpha" || one.LocalDebt != 4 || one.LocalTokens != 0 || one.Requests.Allowed != 5 {
		t.Errorf("apps/alpha after a charge of 4: %+v", one)
	}
	get(t, apiWith(c), "/rate_limit/apps/*", &one)
	if one.ID != "*" || one.Requests.Allowed != 3 {
		t.Errorf("apps/*: %+v", one)
	}

	_, err := call(apiWith(c), http.MethodGet, "/rate_limit/apps/stranger")
	if msg := apiErr(t, err, http.StatusNotFound); !strings.Contains(msg, `unknown app "stranger" in cluster "c1"`) {
		t.Errorf("unknown app: %q", msg)
	}
}

// TestAppsUnknownRejected: with unknown_app reject there is no "*" bucket: "*" has no policy
// and carries the unknown_app rejections.
func TestAppsUnknownRejected(t *testing.T) {
	cfg := testConfig()
	cfg.UnknownApp = limiter.UnknownReject
	c := newCluster(t, "c1", cfg, nil)
	c.unknow = 4
	var v AppsView
	get(t, apiWith(c), "/rate_limit/apps", &v)
	if len(v.Apps) != 3 {
		t.Fatalf("apps %+v", v.Apps)
	}
	star := v.Apps[2]
	if star.ID != "*" || star.Policy != nil || star.Requests.Rejected != 4 || star.Requests.Reasons["unknown_app"] != 4 {
		t.Errorf("* with unknown_app reject: %+v", star)
	}
	var conns ConnectionsView
	get(t, apiWith(c), "/rate_limit/connections", &conns)
	if len(conns.Apps) != 2 {
		t.Errorf("connections of a cluster without \"*\": %+v", conns.Apps)
	}
}

// TestConnections: GET /rate_limit/connections shows the cluster total and a page of apps in
// the apps list's order ("*" last), with an app a reload removed while in flight.
func TestConnections(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	tk, _ := c.conns.Acquire("alpha", 3)
	tk2, _ := c.conns.Acquire("alpha", 3)
	tk3, _ := c.conns.Acquire("*", 0)
	tk2.Release()
	t.Cleanup(func() { tk.Release(); tk3.Release() })
	c.conns.Acquire("removed", 0) // an app the config no longer has, still in flight

	var v ConnectionsView
	get(t, apiWith(c), "/rate_limit/connections", &v)
	want := ConnectionsView{
		Cluster: "c1",
		Total:   ConnectionView{Current: 3, Peak: 3, Limit: 100},
		Apps: []ConnectionView{
			{App: "alpha", Current: 1, Peak: 2, Limit: 3},
			{App: "beta", Limit: 40},
			{App: "removed", Current: 1, Peak: 1, Limit: 40},
			{App: "*", Current: 1, Peak: 1, Limit: 40},
		},
		AppCount: 4, Sort: "id",
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("connections\n got %+v\nwant %+v", v, want)
	}

	// A page of the busiest, then the next page from its cursor.
	var top ConnectionsView
	get(t, apiWith(c), "/rate_limit/connections?sort=-in_flight&limit=2", &top)
	if len(top.Apps) != 2 || top.AppCount != 4 || top.NextCursor == nil || top.Apps[0].Current != 1 || top.Apps[1].Current != 1 {
		t.Fatalf("first page by in flight: %+v", top)
	}
	var rest ConnectionsView
	get(t, apiWith(c), "/rate_limit/connections?sort=-in_flight&limit=2&cursor="+*top.NextCursor, &rest)
	seen := map[string]bool{}
	for _, a := range append(top.Apps, rest.Apps...) {
		seen[a.App] = true
	}
	if len(seen) != 4 || rest.NextCursor != nil || rest.Total != want.Total {
		t.Errorf("two pages by in flight: %+v then %+v", top, rest)
	}
	if w, _ := call(apiWith(c), http.MethodGet, "/rate_limit/connections?limit=0"); w.Code != http.StatusBadRequest {
		t.Errorf("?limit=0: %d %s", w.Code, w.Body)
	}
}

// emergencyStore is a MemoryStore whose L1 is in an operator-set emergency until a known time.
type emergencyStore struct {
	store.Store
	until time.Time
}

func (s emergencyStore) Report(ctx context.Context, rep store.Report) (store.ClusterState, error) {
	st, err := s.Store.Report(ctx, rep)
	st.Emergency, st.EmergencyReason, st.EmergencyUntil = true, "usage 0.97 >= 0.95", s.until
	st.Usage, st.Factors = 0.97, [store.MaxPriority + 1]float64{1, 0.5, 0.1, 0}
	return st, err
}

// TestEmergency: GET /rate_limit/emergency reflects L1's last known state, as does the overview.
func TestEmergency(t *testing.T) {
	calm := newCluster(t, "calm", testConfig(), nil)
	var e EmergencyView
	get(t, apiWith(calm), "/rate_limit/emergency", &e)
	if e != (EmergencyView{}) {
		t.Errorf("calm cluster: %+v", e)
	}
	w, _ := call(apiWith(calm), http.MethodGet, "/rate_limit/emergency")
	if got := strings.TrimSpace(w.Body.String()); got != `{"active":false,"source":"","reason":"","until":null}` {
		t.Errorf("calm body %s", got)
	}

	until := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	hot := newCluster(t, "hot", testConfig(), emergencyStore{memstore.New(nil), until})
	deadline := time.Now().Add(5 * time.Second)
	for !hot.lim.State().Emergency {
		if time.Now().After(deadline) {
			t.Fatal("no report within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	get(t, apiWith(calm, hot), "/rate_limit/emergency?cluster=hot", &e)
	if !e.Active || e.Source != "auto" || e.Reason != "usage 0.97 >= 0.95" || e.Until == nil || !e.Until.Equal(until) {
		t.Errorf("emergency %+v", e)
	}
	var v ClusterView
	get(t, apiWith(calm, hot), "/rate_limit/?cluster=hot", &v)
	if !v.Emergency.Active || v.Usage != 0.97 || !reflect.DeepEqual(v.Factors, []float64{1, 0.5, 0.1, 0}) {
		t.Errorf("overview in emergency: %+v", v)
	}
}

// TestClusterSelection: ?cluster may be omitted with exactly one cluster; otherwise 400 naming
// the choices; an unknown cluster is 404.
func TestClusterSelection(t *testing.T) {
	c1 := newCluster(t, "c1", testConfig(), nil)
	c2 := newCluster(t, "c2", testConfig(), nil)
	routes := []string{"/rate_limit/", "/rate_limit/apps", "/rate_limit/apps/alpha", "/rate_limit/connections", "/rate_limit/emergency"}
	for _, route := range routes {
		const sep = "?"
		// one cluster: may be omitted, may be named
		for _, target := range []string{route, route + sep + "cluster=c1"} {
			if w, err := call(apiWith(c1), http.MethodGet, target); err != nil || w.Code != 200 {
				t.Errorf("GET %s with one cluster: %d %v", target, w.Code, err)
			}
		}
		// two clusters: must be named
		_, err := call(apiWith(c2, c1), http.MethodGet, route)
		if msg := apiErr(t, err, http.StatusBadRequest); !strings.Contains(msg, `choose one with ?cluster=<id> ("c1", "c2")`) {
			t.Errorf("GET %s with two clusters: %q", route, msg)
		}
		w, err := call(apiWith(c1, c2), http.MethodGet, route+sep+"cluster=c2")
		if err != nil || w.Code != 200 {
			t.Errorf("GET %s?cluster=c2: %v", route, err)
		}
		_, err = call(apiWith(c1, c2), http.MethodGet, route+sep+"cluster=nope")
		if msg := apiErr(t, err, http.StatusNotFound); msg != `unknown cluster "nope" (this process runs "c1", "c2")` {
			t.Errorf("GET %s?cluster=nope: %q", route, msg)
		}
		_, err = call(apiWith(), http.MethodGet, route)
		apiErr(t, err, http.StatusNotFound)
	}
	var v ClusterView
	get(t, apiWith(c1, c2), "/rate_limit/?cluster=c2", &v)
	if v.Cluster != "c2" || v.Instance != c2.lim.Config().Instance {
		t.Errorf("selected %q (%s), want c2", v.Cluster, v.Instance)
	}

	// the same id on two Stores (a reload moving the cluster): one is shown, chosen stably
	dup := &testCluster{id: "c1", store: "redis", lim: c2.lim, conns: c2.conns}
	for _, order := range [][]Cluster{{dup, c1}, {c1, dup}} {
		get(t, apiWith(order...), "/rate_limit/", &v)
		if v.Store != "memory" || v.Instance != c1.lim.Config().Instance {
			t.Errorf("duplicate id: shown %+v, want the memory one", v)
		}
	}
}

// TestMethodsAndPaths: a method a route does not take is 405 with Allow; unknown paths are 404.
func TestMethodsAndPaths(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	for route, allowed := range map[string]string{
		"/rate_limit/": "GET", "/rate_limit/apps": "GET", "/rate_limit/apps/alpha": "GET, PUT, DELETE",
		"/rate_limit/clusters/c1": "GET, PUT, DELETE", "/rate_limit/connections": "GET", "/rate_limit/emergency": "GET",
		"/rate_limit/emergency/activate": "POST", "/rate_limit/emergency/deactivate": "POST",
	} {
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead} {
			if strings.Contains(allowed, m) {
				continue
			}
			w, err := call(apiWith(c), m, route)
			msg := apiErr(t, err, http.StatusMethodNotAllowed)
			if !strings.Contains(msg, "method "+m+" not allowed on "+route) {
				t.Errorf("%s %s: %q", m, route, msg)
			}
			if got := w.Header().Get("Allow"); got != allowed {
				t.Errorf("%s %s: Allow %q", m, route, got)
			}
			if w.Body.Len() != 0 {
				t.Errorf("%s %s: body written: %q", m, route, w.Body.String())
			}
		}
	}
	for _, path := range []string{
		"/rate_limit/nope", "/rate_limit/apps/alpha/x", "/rate_limit/emergency/x",
		"/rate_limit/clusters/", "/rate_limit/clusters/c1/x",
	} {
		_, err := call(apiWith(c), http.MethodGet, path)
		apiErr(t, err, http.StatusNotFound)
	}
	// an unknown path is 404 whatever the method
	_, err := call(apiWith(c), http.MethodPost, "/rate_limit/nope")
	if msg := apiErr(t, err, http.StatusNotFound); !strings.Contains(msg, "no rate_limit admin route /rate_limit/nope") {
		t.Errorf("POST unknown path: %q", msg)
	}
}
