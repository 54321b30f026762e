package tierbucket

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/admin"
	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
)

// adminGet serves GET target with the admin.api.rate_limit module as Caddy instantiates it
// (its installed source is this package's live clusters) and decodes the answer into v.
func adminGet(t *testing.T, target string, v any) {
	t.Helper()
	info, err := caddy.GetModule("admin.api.rate_limit")
	if err != nil {
		t.Fatal(err)
	}
	routes := info.New().(caddy.AdminRouter).Routes()
	w := httptest.NewRecorder()
	if err := routes[0].Handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil)); err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %q: %v", target, w.Body, err)
	}
}

// TestAdminSource: the admin API sees the handlers' cluster states (package cluster): the
// Store kind, the handler's decisions (those taken before there is an app under "*"), the
// policies as configured.
func TestAdminSource(t *testing.T) {
	h := unitHandler(t, "unit-admin", map[string]*AppConfig{
		"a": {Guaranteed: 1000, Burst: 1000, MaxConnections: 2},
		"b": {Guaranteed: 5, Priority: 2, Warmup: caddy.Duration(time.Minute)},
	})
	for _, app := range []string{"a", "a", "a", "", "stranger", "stranger"} {
		_ = h.ServeHTTP(httptest.NewRecorder(), get(app), nopNext)
	}

	var found bool
	for _, c := range cluster.Live() {
		if c.ID() == "unit-admin" {
			found = true
			if c.Store() != "memory" || c.Limiter() != h.state.Limiter() || c.Connections() != h.state.Connections() {
				t.Errorf("adapter: store %q", c.Store())
			}
		}
	}
	if !found {
		t.Fatal("the cluster is not listed by cluster.Live")
	}

	var cv admin.ClusterView
	adminGet(t, "/rate_limit/?cluster=unit-admin", &cv)
	if cv.Cluster != "unit-admin" || cv.Store != "memory" || cv.Instance != cluster.InstanceID() || cv.UnknownApp != "shared" {
		t.Errorf("overview %+v", cv)
	}

	var av admin.AppsView
	adminGet(t, "/rate_limit/apps?cluster=unit-admin", &av)
	if len(av.Apps) != 3 {
		t.Fatalf("apps %+v", av.Apps)
	}
	a, b, star := av.Apps[0], av.Apps[1], av.Apps[2]
	if a.ID != "a" || a.Requests.Allowed != 3 || a.Requests.Rejected != 0 || a.Cost != 3 || a.Source != "caddyfile" ||
		a.Policy == nil || a.Policy.MaxConnections != 2 || a.Policy.Burst != 1000 {
		t.Errorf("app a: %+v policy %+v", a, a.Policy)
	}
	// burst defaults to guaranteed; max_connections to connections.app
	if want := (admin.PolicyView{Guaranteed: 5, Burst: 5, Priority: 2, MaxConnections: 1000, Warmup: "1m0s", Enabled: true}); b.ID != "b" || b.Policy == nil || *b.Policy != want {
		t.Errorf("app b: %+v, want %+v", b.Policy, want)
	}
	if want := (admin.PolicyView{
		Guaranteed: DefaultAppGuaranteed, Burst: DefaultAppBurst, Priority: DefaultAppPriority,
		MaxConnections: 1000, Warmup: "0s", Enabled: true,
	}); star.ID != "*" || star.Policy == nil || *star.Policy != want {
		t.Errorf("*: %+v, want %+v", star.Policy, want)
	}
	if star.Requests.Allowed != 2 || star.Requests.Rejected != 1 || star.Requests.Reasons["invalid_app_id"] != 1 {
		t.Errorf("* requests %+v, want 2 allowed and the invalid app id", star.Requests)
	}
}
