package tierbucket

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/admin"
	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
)

// TestClusterHistory: a cluster state owns a history with a sample from its start, shown to
// the admin API through package cluster; a reading (as the sampler takes one a second) counts
// the handler's decisions of that second, those taken before there is an app included.
func TestClusterHistory(t *testing.T) {
	h := unitHandler(t, "unit-history", map[string]*AppConfig{"a": {Guaranteed: 1000, Burst: 1000}})
	rec := h.state.History()
	if _, _, ok := rec.Latest(); !ok {
		t.Fatal("no sample at the state's start")
	}
	var found bool
	for _, c := range cluster.Live() {
		if c.ID() == "unit-history" {
			found = c.History() == rec
		}
	}
	if !found {
		t.Fatal("State.History is not the state's recorder")
	}
	for _, app := range []string{"a", "a", "a", ""} {
		_ = h.ServeHTTP(httptest.NewRecorder(), get(app), nopNext)
	}
	later := time.Now().Add(time.Hour) // a second of its own, after every sampler tick of the test
	rec.Record(later, admin.Read(h.state))
	s, apps, _ := rec.Latest()
	if s.T != later.Unix() || s.Allowed != 3 || s.Rejected != 1 || s.Reasons["invalid_app_id"] != 1 || s.Cost != 3 {
		t.Errorf("sample %+v: want 3 allowed, 1 invalid_app_id, cost 3", s)
	}
	if a := apps["a"]; a.Allowed != 3 || a.Burst != 1000 || a.Guaranteed != 1000 {
		t.Errorf("app a: %+v", a)
	}
}
