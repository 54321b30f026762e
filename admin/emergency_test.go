package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// post runs a POST of body with the content type ("": none) through the module's route.
func post(a API, target, contentType, body string) (*httptest.ResponseRecorder, error) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	r.RemoteAddr = "192.0.2.7:4711"
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return w, a.Routes()[0].Handler.ServeHTTP(w, r)
}

// storedEmergency is the emergency the Store holds for c's cluster now (a report of its own,
// not the limiter's last known state).
func storedEmergency(t *testing.T, shared store.Store, c *testCluster) store.ClusterState {
	t.Helper()
	st, err := shared.Report(context.Background(), store.Report{Cluster: c.lim.Config().Cluster, Instance: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// emergencyCluster: a cluster without capacity on its own MemoryStore, and an API whose log
// is observed.
func emergencyCluster(t *testing.T) (*testCluster, store.Store, API, *observer.ObservedLogs) {
	shared := memstore.New(nil)
	cfg := testConfig()
	cfg.Cluster.EmergencyRatios = [store.MaxPriority + 1]float64{1, 0.5, 0.1, 0} // the root's defaults
	c := newCluster(t, "c1", cfg, shared)
	core, logs := observer.New(zapcore.DebugLevel)
	a := apiWith(c)
	a.logger = zap.New(core)
	return c, shared, a, logs
}

func decodeView(t *testing.T, w *httptest.ResponseRecorder) EmergencyView {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var v EmergencyView
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEmergencyActivateDeactivate: activate stores the operator emergency, this instance applies
// it at once (the P3 unknown apps are blocked, P1 alpha is throttled but admitted), GET shows it;
// deactivate clears it. Both changes are logged with the remote address and before/after.
func TestEmergencyActivateDeactivate(t *testing.T) {
	c, shared, a, logs := emergencyCluster(t)
	start := time.Now()
	w, err := post(a, "/rate_limit/emergency/activate", "application/json; charset=utf-8",
		`{"reason": "backend maintenance", "duration": "5m"}`)
	if err != nil {
		t.Fatal(err)
	}
	v := decodeView(t, w)
	if !v.Active || v.Source != "operator" || v.Reason != "backend maintenance" || v.Until == nil ||
		v.Until.Before(start.Add(5*time.Minute).Add(-time.Millisecond)) || v.Until.After(time.Now().Add(5*time.Minute)) {
		t.Fatalf("activate answered %+v", v)
	}
	var g EmergencyView
	get(t, a, "/rate_limit/emergency", &g)
	if g.Active != v.Active || g.Source != v.Source || g.Reason != v.Reason || !g.Until.Equal(*v.Until) {
		t.Errorf("GET %+v after activate %+v", g, v)
	}
	if st := storedEmergency(t, shared, c); !st.Emergency || st.EmergencySource != "operator" ||
		st.Factors != [4]float64{1, 0.5, 0.1, 0} {
		t.Errorf("stored %+v", st)
	}
	// Applied at once: "*" is priority 3 (ratio 0), alpha priority 1 (ratio 0.5).
	d := mustApp(t, c, "stranger").Take(context.Background(), 1, 0)
	if d.Allowed || d.Reason != store.ReasonEmergencyBlocked || d.RetryAfter < 4*time.Minute {
		t.Errorf("P3 app in the operator emergency: %+v", d)
	}
	if allowed, _ := take(t, c, "alpha", 1); allowed != 1 {
		t.Error("P1 app rejected in the operator emergency")
	}
	if len(logs.All()) != 1 {
		t.Fatalf("log entries %v", logs.All())
	}
	e := logs.All()[0]
	fields := e.ContextMap()
	if e.Level != zapcore.InfoLevel || !strings.Contains(e.Message, "activated") || fields["remote_addr"] != "192.0.2.7:4711" ||
		fields["cluster"] != "c1" || fields["before"] == nil || fields["after"] == nil {
		t.Errorf("log entry %s %v", e.Message, fields)
	}

	// Deactivate: no body needed.
	w, err = post(a, "/rate_limit/emergency/deactivate", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if v := decodeView(t, w); v != (EmergencyView{}) {
		t.Errorf("deactivate answered %+v", v)
	}
	if st := storedEmergency(t, shared, c); st.Emergency {
		t.Errorf("stored after deactivate %+v", st)
	}
	if d := mustApp(t, c, "stranger").Take(context.Background(), 1, 0); !d.Allowed {
		t.Errorf("P3 app after deactivate: %+v", d)
	}
	if n := len(logs.All()); n != 2 || !strings.Contains(logs.All()[1].Message, "deactivated") {
		t.Errorf("log entries %v", logs.All())
	}

	// Without a duration: until deactivated; an empty JSON object is a valid deactivate body.
	w, err = post(a, "/rate_limit/emergency/activate?cluster=c1", "application/json", `{"reason":"x","duration":null}`)
	if err != nil {
		t.Fatal(err)
	}
	if v := decodeView(t, w); !v.Active || v.Source != "operator" || v.Until != nil {
		t.Errorf("activate without duration: %+v", v)
	}
	if _, err := post(a, "/rate_limit/emergency/deactivate", "application/json", ` {} `); err != nil {
		t.Fatal(err)
	}
	if st := storedEmergency(t, shared, c); st.Emergency {
		t.Errorf("stored after deactivate %+v", st)
	}
}

func mustApp(t *testing.T, c *testCluster, id string) *limiter.App {
	t.Helper()
	a, r := c.lim.App(id)
	if a == nil {
		t.Fatalf("app %q: %v", id, r)
	}
	return a
}

// TestEmergencyRequestErrors: 415, 413, 400 (naming the field), 405, and cluster selection;
// nothing changes and nothing is logged on any of them.
func TestEmergencyRequestErrors(t *testing.T) {
	c, shared, a, logs := emergencyCluster(t)
	activate := "/rate_limit/emergency/activate"
	long := strings.Repeat("é", 257)
	for _, tc := range []struct {
		target, contentType, body string
		status                    int
		msg                       string
	}{
		{activate, "", `{"reason":"x"}`, 415, `Content-Type ""`},
		{activate, "text/plain", `{"reason":"x"}`, 415, "must be application/json"},
		{activate, "application/jsonx", `{"reason":"x"}`, 415, "must be application/json"},
		{activate, "application/json", `{"reason":"` + strings.Repeat("a", maxBody) + `"}`, 413, "larger than 65536 bytes"},
		{activate, "application/json", "", 400, "missing request body"},
		{activate, "application/json", `{"reason":`, 400, "invalid JSON body"},
		{activate, "application/json", `[1]`, 400, "want an object"},
		{activate, "application/json", `{"reason":"x"} {}`, 400, "data after the object"},
		{activate, "application/json", `{}`, 400, `field "reason": required`},
		{activate, "application/json", `{"reason":""}`, 400, `field "reason": 0 characters`},
		{activate, "application/json", `{"reason":"` + long + `"}`, 400, `field "reason": 257 characters`},
		{activate, "application/json", `{"reason":5}`, 400, `field "reason"`},
		{activate, "application/json", `{"reason":"a\u0000b"}`, 400, `control characters`},
		{activate, "application/json", `{"reason":"\ud800"}`, 400, `invalid UTF-8`},
		{activate, "application/json", `{"Reason":"x"}`, 400, `unknown field "Reason"`},
		{activate, "application/json", `{"reason":"x","duration":"5 minutes"}`, 400, `field "duration": "5 minutes"`},
		{activate, "application/json", `{"reason":"x","duration":300}`, 400, `field "duration": 300 is not a string`},
		{activate, "application/json", `{"reason":"x","duration":"-5m"}`, 400, `field "duration": "-5m": must be > 0`},
		{activate, "application/json", `{"reason":"x","duration":"0s"}`, 400, `must be > 0`},
		{activate, "application/json", `{"reason":"x","duration":"400d"}`, 400, `at most`},
		{activate, "application/json", `{"reason":"x","durration":"5m"}`, 400, `unknown field "durration"`},
		{activate + "?cluster=nope", "application/json", `{"reason":"x"}`, 404, `unknown cluster "nope"`},
		{"/rate_limit/emergency/deactivate", "text/plain", `x`, 415, "must be application/json"},
		{"/rate_limit/emergency/deactivate", "application/json", `{"reason":"x"}`, 400, `unknown field "reason"`},
		{"/rate_limit/emergency/deactivate", "application/json", strings.Repeat(" ", maxBody+1), 413, "larger than"},
	} {
		_, err := post(a, tc.target, tc.contentType, tc.body)
		short := tc.body
		if len(short) > 40 {
			short = short[:40] + "…"
		}
		if msg := apiErr(t, err, tc.status); !strings.Contains(msg, tc.msg) {
			t.Errorf("POST %s %q %s: %q, want %q", tc.target, tc.contentType, short, msg, tc.msg)
		}
	}
	// 256 characters (512 bytes) are fine.
	if _, err := post(a, activate, "application/json", `{"reason":"`+strings.Repeat("é", 256)+`"}`); err != nil {
		t.Fatalf("reason of 256 characters: %v", err)
	}
	if st := storedEmergency(t, shared, c); !st.Emergency || st.EmergencyReason != strings.Repeat("é", 256) {
		t.Fatalf("stored %+v", st)
	}
	logs.TakeAll()
	// An invalid request leaves the emergency in force as it was.
	if _, err := post(a, "/rate_limit/emergency/deactivate", "text/plain", `{}`); err == nil {
		t.Fatal("deactivate with text/plain: no error")
	}
	if st := storedEmergency(t, shared, c); !st.Emergency {
		t.Fatal("an invalid deactivate cleared the emergency")
	}
	if _, err := post(a, "/rate_limit/emergency/deactivate", "", ""); err != nil {
		t.Fatal(err)
	}
	logs.TakeAll()

	// Methods: the POST routes take POST only, GET /rate_limit/emergency GET only.
	for _, route := range []string{activate, "/rate_limit/emergency/deactivate"} {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodHead} {
			w, err := call(a, m, route)
			if msg := apiErr(t, err, http.StatusMethodNotAllowed); !strings.Contains(msg, "method "+m+" not allowed on "+route) {
				t.Errorf("%s %s: %q", m, route, msg)
			}
			if got := w.Header().Get("Allow"); got != "POST" {
				t.Errorf("%s %s: Allow %q", m, route, got)
			}
		}
	}
	w, err := post(a, "/rate_limit/emergency", "application/json", `{"reason":"x"}`)
	apiErr(t, err, http.StatusMethodNotAllowed)
	if w.Header().Get("Allow") != "GET" {
		t.Errorf("POST /rate_limit/emergency: Allow %q", w.Header().Get("Allow"))
	}
	// Two clusters: ?cluster is required.
	other := newCluster(t, "c2", testConfig(), shared)
	_, err = post(apiWith(c, other), activate, "application/json", `{"reason":"x"}`)
	apiErr(t, err, http.StatusBadRequest)

	if st := storedEmergency(t, shared, c); st.Emergency {
		t.Errorf("an error changed the stored state: %+v", st)
	}
	if st := c.lim.State(); st.Emergency {
		t.Errorf("an error changed the limiter's state: %+v", st)
	}
	if n := logs.Len(); n != 0 {
		t.Errorf("errors logged as changes: %v", logs.All())
	}
}

// TestEmergencyStoreFailure: a Store that fails is 503, nothing logged.
func TestEmergencyStoreFailure(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), failingStore{memstore.New(nil)})
	core, logs := observer.New(zapcore.DebugLevel)
	a := apiWith(c)
	a.logger = zap.New(core)
	_, err := post(a, "/rate_limit/emergency/activate", "application/json", `{"reason":"x"}`)
	if msg := apiErr(t, err, http.StatusServiceUnavailable); !strings.Contains(msg, "the Store failed") {
		t.Errorf("%q", msg)
	}
	if logs.Len() != 0 {
		t.Errorf("logged %v", logs.All())
	}
}

type failingStore struct{ store.Store }

func (failingStore) SetEmergency(context.Context, store.ClusterPolicy, store.Emergency) error {
	return context.DeadlineExceeded
}

// TestWithoutEvents: an API without an events app (one not provisioned, or provisioned where
// Caddy's events app does not load) keeps a logger named as the module's, and a change through
// it is made, logged and not emitted.
func TestWithoutEvents(t *testing.T) {
	var bare API
	if bare.events != nil || bare.log() == nil || bare.log().Name() != loggerName {
		t.Errorf("events %v, logger %v", bare.events, bare.log())
	}
	c, _, a, logs := overrideCluster(t)
	if a.events != nil {
		t.Fatal("the test API has an events app")
	}
	if w, err := send(a, http.MethodPut, "/rate_limit/apps/alpha", `{"guaranteed": 1}`); err != nil || w.Code != 200 {
		t.Fatalf("PUT without events: %d %v", w.Code, err)
	}
	if c.lim.ConfigChanges() != 1 || logs.Len() != 1 {
		t.Errorf("changes %d, logged %d, want 1 and 1", c.lim.ConfigChanges(), logs.Len())
	}
}
