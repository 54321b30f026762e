package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// send runs method target with a JSON body ("" : none) through the module's route.
func send(a API, method, target, body string) (*httptest.ResponseRecorder, error) {
	w := httptest.NewRecorder()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, target, nil)
	} else {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	}
	r.RemoteAddr = "192.0.2.7:4711"
	return w, a.Routes()[0].Handler.ServeHTTP(w, r)
}

// overrideCluster: alpha and beta configured, capacity 1000 (900 to give out, 100.01 given), on
// its own MemoryStore, with an observed log.
func overrideCluster(t *testing.T) (*testCluster, store.Store, API, *observer.ObservedLogs) {
	shared := memstore.New(nil)
	cfg := testConfig()
	cfg.Cluster.Capacity = 1000
	cfg.Cluster.ReservedRatio = 0.1
	c := newCluster(t, "c1", cfg, shared)
	core, logs := observer.New(zapcore.InfoLevel)
	a := apiWith(c)
	a.logger = zap.New(core)
	return c, shared, a, logs
}

func decodeApp(t *testing.T, w *httptest.ResponseRecorder) AppView {
	t.Helper()
	var v AppView
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %q: %v", w.Body.String(), err)
	}
	return v
}

func TestPutAndDeleteAppOverride(t *testing.T) {
	c, _, a, logs := overrideCluster(t)
	w, err := send(a, http.MethodPut, "/rate_limit/apps/alpha", `{"guaranteed":2,"burst":10,"warmup":"1m"}`)
	if err != nil {
		t.Fatal(err)
	}
	v := decodeApp(t, w)
	want := PolicyView{Guaranteed: 2, Burst: 10, Priority: 1, MaxConnections: 3, Warmup: "1m0s", Enabled: true}
	if v.Policy == nil || *v.Policy != want || v.Source != "override" ||
		!reflect.DeepEqual(v.Override, map[string]any{"guaranteed": 2.0, "burst": 10.0, "warmup": "1m0s"}) {
		t.Fatalf("after PUT: %+v policy %+v", v, v.Policy)
	}
	if p := mustApp(t, c, "alpha").Policy(); p.Guaranteed != 2 || p.Burst != 10 {
		t.Fatalf("the bucket enforces %+v", p)
	}
	if logs.Len() != 1 || logs.All()[0].ContextMap()["remote_addr"] != "192.0.2.7:4711" {
		t.Fatalf("log: %+v", logs.All())
	}
	ctx := logs.All()[0].ContextMap()
	if b, ok := ctx["before"].(map[string]any); !ok || b["guaranteed"] != 0.01 {
		t.Fatalf("logged before %v", ctx["before"])
	}
	if c.lim.ConfigChanges() != 1 {
		t.Fatalf("config changes %d, want 1", c.lim.ConfigChanges())
	}

	w, err = send(a, http.MethodDelete, "/rate_limit/apps/alpha", "")
	if err != nil {
		t.Fatal(err)
	}
	v = decodeApp(t, w)
	want = PolicyView{Guaranteed: 0.01, Burst: 5, Priority: 1, MaxConnections: 3, Warmup: "0s", Enabled: true}
	if *v.Policy != want || v.Source != "caddyfile" || v.Override != nil {
		t.Fatalf("after DELETE: %+v policy %+v", v, v.Policy)
	}
	// DELETE again: nothing to remove, the configured policy, no change.
	if _, err := send(a, http.MethodDelete, "/rate_limit/apps/alpha", ""); err != nil {
		t.Fatal(err)
	}
	if c.lim.ConfigChanges() != 2 || logs.Len() != 2 {
		t.Fatalf("changes %d, log lines %d; want 2 and 2", c.lim.ConfigChanges(), logs.Len())
	}
}

func TestPutCreatesApp(t *testing.T) {
	c, _, a, _ := overrideCluster(t)
	w, err := send(a, http.MethodPut, "/rate_limit/apps/tenant-7", `{"guaranteed":50,"burst":100}`)
	if err != nil {
		t.Fatal(err)
	}
	if v := decodeApp(t, w); v.Source != "api" || v.Policy.Priority != 3 || v.Policy.Guaranteed != 50 {
		t.Fatalf("created app: %+v %+v (priority from the app * template: 3)", v, v.Policy)
	}
	var all AppsView
	get(t, a, "/rate_limit/apps", &all)
	if len(all.Apps) != 4 || all.Apps[2].ID != "tenant-7" {
		t.Fatalf("apps after PUT: %+v", all.Apps)
	}
	if app, _ := c.lim.App("tenant-7"); app == nil || app.Label() != "tenant-7" {
		t.Fatalf("tenant-7 has no bucket of its own")
	}
	w, err = send(a, http.MethodDelete, "/rate_limit/apps/tenant-7", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.Body.String(), `"removed":true`) {
		t.Fatalf("DELETE of a created app: %s", w.Body)
	}
	_, err = send(a, http.MethodDelete, "/rate_limit/apps/tenant-7", "")
	apiErr(t, err, http.StatusNotFound)
}

func TestOverrideBadInputChangesNothing(t *testing.T) {
	c, shared, a, logs := overrideCluster(t)
	before := c.lim.Config()
	for _, tc := range []struct {
		name, method, target, ctype, body string
		status                            int
		fields                            []string // the 400's "fields"
	}{
		{"garbage", "PUT", "/rate_limit/apps/alpha", "application/json", `{"guaranteed":`, 400, nil},
		{"unknown field", "PUT", "/rate_limit/apps/alpha", "application/json", `{"rate":5}`, 400, nil},
		{"wrong type", "PUT", "/rate_limit/apps/alpha", "application/json", `{"guaranteed":"lots"}`, 400, nil},
		{"no body", "PUT", "/rate_limit/apps/alpha", "", ``, 400, nil},
		{"not json", "PUT", "/rate_limit/apps/alpha", "text/plain", `{"guaranteed":1}`, 415, nil},
		{"huge", "PUT", "/rate_limit/apps/alpha", "application/json", `{"guaranteed":1` + strings.Repeat(" ", 70000) + `}`, 413, nil},
		{"burst < guaranteed", "PUT", "/rate_limit/apps/alpha", "application/json", `{"guaranteed":10,"burst":5}`, 400, []string{"burst"}},
		{"empty override", "PUT", "/rate_limit/apps/alpha", "application/json", `{}`, 400, nil},
		{"null override", "PUT", "/rate_limit/apps/alpha", "application/json", `null`, 400, nil},
		{"only nulls", "PUT", "/rate_limit/apps/alpha", "application/json", `{"guaranteed":null}`, 400, nil},
		{"field name case", "PUT", "/rate_limit/apps/alpha", "application/json", `{"Guaranteed":2}`, 400, nil},
		{"empty cluster override", "PUT", "/rate_limit/clusters/c1", "application/json", `{}`, 400, nil},
		{"cluster capacity absurd", "PUT", "/rate_limit/clusters/c1", "application/json", `{"capacity":1e300}`, 400, []string{"capacity"}},
		{"several fields", "PUT", "/rate_limit/apps/alpha", "application/json", `{"guaranteed":-1,"priority":7,"warmup":"-5s"}`, 400, []string{"guaranteed", "priority", "warmup"}},
		{"bad warmup", "PUT", "/rate_limit/apps/alpha", "application/json", `{"warmup":"soon"}`, 400, []string{"warmup"}},
		{"over capacity", "PUT", "/rate_limit/apps/beta", "application/json", `{"guaranteed":900,"burst":900}`, 400, []string{"guaranteed"}},
		{"invalid id", "PUT", "/rate_limit/apps/a%20b", "application/json", `{"guaranteed":1}`, 400, nil},
		{"invalid id, GET", "GET", "/rate_limit/apps/a%20b", "", ``, 400, nil},
		{"invalid id, DELETE", "DELETE", "/rate_limit/apps/a%20b", "", ``, 400, nil},
		{"escaped slash in id", "PUT", "/rate_limit/apps/a%2Fb", "application/json", `{"guaranteed":1}`, 400, nil},
		{"cluster twice", "PUT", "/rate_limit/apps/alpha?cluster=c1&cluster=c2", "application/json", `{"guaranteed":1}`, 400, nil},
		{"id too long", "GET", "/rate_limit/apps/" + strings.Repeat("a", 129), "", ``, 400, nil},
		{"template", "PUT", "/rate_limit/apps/*", "application/json", `{"guaranteed":1}`, 400, nil},
		{"cluster ratio", "PUT", "/rate_limit/clusters/c1", "application/json", `{"reserved_ratio":1}`, 400, []string{"reserved_ratio"}},
		{"max_connections zero", "PUT", "/rate_limit/apps/alpha", "application/json", `{"max_connections":0}`, 400, []string{"max_connections"}},
		{"max_connections negative", "PUT", "/rate_limit/apps/alpha", "application/json", `{"max_connections":-1}`, 400, []string{"max_connections"}},
		// Above 2^53 the Store's doubles cannot count it: every request of the app was refused.
		{"max_connections above 2^53", "PUT", "/rate_limit/apps/alpha", "application/json", `{"max_connections":9223372036854775807}`, 400, []string{"max_connections"}},
		{"cluster capacity below guarantees", "PUT", "/rate_limit/clusters/c1", "application/json", `{"capacity":100}`, 400, []string{"capacity"}},
		{"cluster ratios count", "PUT", "/rate_limit/clusters/c1", "application/json", `{"emergency_ratios":[1,1]}`, 400, []string{"emergency_ratios"}},
		{"unknown cluster", "PUT", "/rate_limit/clusters/nope", "application/json", `{"capacity":100}`, 404, nil},
		{"patch", "PATCH", "/rate_limit/apps/alpha", "application/json", `{"guaranteed":1}`, 405, nil},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
		if tc.ctype != "" {
			r.Header.Set("Content-Type", tc.ctype)
		}
		err := a.Routes()[0].Handler.ServeHTTP(w, r)
		if tc.fields != nil {
			var body struct {
				Error  string            `json:"error"`
				Fields map[string]string `json:"fields"`
			}
			if err != nil || w.Code != 400 || json.Unmarshal(w.Body.Bytes(), &body) != nil {
				t.Errorf("%s: err %v, status %d, body %s", tc.name, err, w.Code, w.Body)
				continue
			}
			var got []string
			for f := range body.Fields {
				got = append(got, f)
			}
			if len(got) != len(tc.fields) || body.Error == "" {
				t.Errorf("%s: fields %v, want %v (%s)", tc.name, body.Fields, tc.fields, body.Error)
			}
			for _, f := range tc.fields {
				if body.Fields[f] == "" {
					t.Errorf("%s: no error on field %q: %v", tc.name, f, body.Fields)
				}
			}
			continue
		}
		apiErr(t, err, tc.status)
	}
	if !reflect.DeepEqual(c.lim.Config(), before) {
		t.Fatal("bad input changed the configuration")
	}
	if o, _ := shared.Overrides(t.Context(), "c1"); o.Version != 0 {
		t.Fatalf("bad input reached the Store: %+v", o)
	}
	if logs.Len() != 0 || c.lim.ConfigChanges() != 0 {
		t.Fatalf("bad input logged %d changes, counted %d", logs.Len(), c.lim.ConfigChanges())
	}
}

func TestClusterOverride(t *testing.T) {
	c, _, a, _ := overrideCluster(t)
	var v ClusterPolicyView
	get(t, a, "/rate_limit/clusters/c1", &v)
	if v.Source != "caddyfile" || v.Policy.Capacity != 1000 || v.Override != nil {
		t.Fatalf("GET: %+v", v)
	}
	w, err := send(a, http.MethodPut, "/rate_limit/clusters/c1", `{"capacity":2000,"emergency_ratios":[1,1,0.5,0]}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Source != "override" || v.Policy.Capacity != 2000 || !reflect.DeepEqual(v.Policy.EmergencyRatios, []float64{1, 1, 0.5, 0}) ||
		v.Policy.ReservedRatio != 0.1 {
		t.Fatalf("after PUT: %+v", v)
	}
	if got := c.lim.Config().Cluster.Capacity; got != 2000 {
		t.Fatalf("the limiter enforces capacity %v", got)
	}
	if _, err := send(a, http.MethodDelete, "/rate_limit/clusters/c1?cluster=c1", ""); err != nil {
		t.Fatal(err)
	}
	if got := c.lim.Config().Cluster; got.Capacity != 1000 || got.EmergencyRatios != [4]float64{} {
		t.Fatalf("after DELETE: %+v", got)
	}
	_, err = send(a, http.MethodGet, "/rate_limit/clusters/c1?cluster=other", "")
	apiErr(t, err, http.StatusBadRequest)
}

// An override of guaranteed alone keeps the configured burst, raised to the new guaranteed
// when below it (alpha is configured with burst 5).
func TestOverrideGuaranteedAloneRaisesBurst(t *testing.T) {
	c, _, a, _ := overrideCluster(t)
	_ = c
	for _, tc := range []struct {
		body              string
		guaranteed, burst float64
	}{
		{`{"guaranteed":2}`, 2, 5},
		{`{"guaranteed":40}`, 40, 40},
	} {
		w, err := send(a, http.MethodPut, "/rate_limit/apps/alpha", tc.body)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if v := decodeApp(t, w); v.Policy.Guaranteed != tc.guaranteed || v.Policy.Burst != tc.burst {
			t.Fatalf("%s: policy %+v, want guaranteed %v burst %v", tc.body, v.Policy, tc.guaranteed, tc.burst)
		}
	}
}

// Overrides that a reload leaves out (they no longer fit the capacity) are shown with the
// reason, and removed through the same instance.
func TestOverrideLeftOutShownAndRemovable(t *testing.T) {
	c, shared, a, _ := overrideCluster(t)
	for target, body := range map[string]string{
		"/rate_limit/apps/alpha":    `{"guaranteed":500,"burst":500}`,
		"/rate_limit/apps/tenant-7": `{"guaranteed":300,"burst":300}`,
	} {
		if _, err := send(a, http.MethodPut, target, body); err != nil {
			t.Fatal(err)
		}
	}
	next := testConfig()
	next.Cluster.ID, next.Cluster.Capacity, next.Cluster.ReservedRatio = "c1", 400, 0.1
	next.Connections = c.conns
	if err := c.lim.Update(next); err != nil {
		t.Fatal(err)
	}

	w, err := send(a, http.MethodGet, "/rate_limit/apps/alpha", "")
	if err != nil {
		t.Fatal(err)
	}
	v := decodeApp(t, w)
	if v.Policy.Guaranteed != 0.01 || v.Override != nil || v.OverrideNotApplied == nil ||
		v.OverrideNotApplied.Override["guaranteed"] != 500.0 || !strings.Contains(v.OverrideNotApplied.Reason, "capacity") {
		t.Fatalf("alpha with its override left out: %+v, not applied %+v", v, v.OverrideNotApplied)
	}
	_, err = send(a, http.MethodGet, "/rate_limit/apps/tenant-7", "")
	if msg := apiErr(t, err, http.StatusNotFound); !strings.Contains(msg, "DELETE") {
		t.Fatalf("GET of an app whose override is left out: %s", msg)
	}
	var cv ClusterPolicyView
	get(t, a, "/rate_limit/clusters/c1", &cv)
	if len(cv.OverridesNotApplied) != 2 || cv.OverridesNotApplied["app:alpha"] == "" || cv.OverridesNotApplied["app:tenant-7"] == "" {
		t.Fatalf("cluster view lists %v, want app:alpha and app:tenant-7", cv.OverridesNotApplied)
	}

	if _, err := send(a, http.MethodDelete, "/rate_limit/apps/alpha", ""); err != nil {
		t.Fatal(err)
	}
	w, err = send(a, http.MethodDelete, "/rate_limit/apps/tenant-7", "")
	if err != nil || !strings.Contains(w.Body.String(), `"removed":true`) {
		t.Fatalf("DELETE tenant-7: %v %s", err, w.Body)
	}
	if o, _ := shared.Overrides(t.Context(), "c1"); len(o.Entries) != 0 {
		t.Fatalf("the Store still holds %v", o.Entries)
	}
	var after ClusterPolicyView
	get(t, a, "/rate_limit/clusters/c1", &after)
	if after.OverridesNotApplied != nil {
		t.Fatalf("still listed as left out: %v", after.OverridesNotApplied)
	}
}

// conflictStore loses every override race: another instance always changed them first.
type conflictStore struct{ store.Store }

func (conflictStore) SetOverride(context.Context, string, store.OverrideChange) (uint64, error) {
	return 0, store.ErrVersionConflict
}

// TestOverrideConflictIs409: a change that keeps losing races with other instances' changes is
// a 409 that says so, not a 503 "the Store failed", and changes nothing.
func TestOverrideConflictIs409(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), conflictStore{memstore.New(nil)})
	before := c.lim.Config()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("PUT", "/rate_limit/apps/alpha", strings.NewReader(`{"guaranteed":5}`))
	r.Header.Set("Content-Type", "application/json")
	err := apiWith(c).Routes()[0].Handler.ServeHTTP(w, r)
	if msg := apiErr(t, err, http.StatusConflict); !strings.Contains(msg, "other instances kept changing") {
		t.Errorf("%q", msg)
	}
	if !reflect.DeepEqual(c.lim.Config(), before) {
		t.Fatal("a refused change changed the configuration")
	}
}
