package admin

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
)

// eventRecorder is a caddyevents.Handler that keeps the events it sees.
type eventRecorder struct {
	mu     sync.Mutex
	events []caddy.Event
}

func (r *eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

// TestChangesEmitEvents: every change through the API is emitted as rate_limit_config_changed
// on Caddy's events app, with the change, the cluster, the remote address and before/after;
// a refused change emits nothing.
func TestChangesEmitEvents(t *testing.T) {
	c, _, a, _ := overrideCluster(t)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	ev := new(caddyevents.App)
	if err := ev.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	rec := new(eventRecorder)
	if err := ev.On(configChangedEvent, rec); err != nil {
		t.Fatal(err)
	}
	a.ctx, a.events = ctx, ev

	for _, step := range []struct{ method, target, body string }{
		{http.MethodPut, "/rate_limit/apps/alpha", `{"guaranteed": 1}`},
		{http.MethodPut, "/rate_limit/apps/alpha", `{"burst": 0.5}`}, // refused: no event
		{http.MethodDelete, "/rate_limit/apps/alpha", ""},
		{http.MethodPut, "/rate_limit/clusters/c1", `{"capacity": 5000}`},
		{http.MethodPost, "/rate_limit/emergency/activate", `{"reason": "drill"}`},
		{http.MethodPut, "/rate_limit/apps/beta", `{"priority": 2}`},
	} {
		_, _ = send(a, step.method, step.target, step.body)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{"app_override_set", "app_override_removed", "cluster_override_set", "emergency_activate", "app_override_set"}
	if len(rec.events) != len(want) {
		t.Fatalf("%d events, want %d (%v)", len(rec.events), len(want), rec.events)
	}
	for i, e := range rec.events {
		d := e.Data
		if e.Name() != configChangedEvent || d["change"] != want[i] || d["cluster"] != c.ID() || d["remote_addr"] != "192.0.2.7:4711" {
			t.Errorf("event %d: %s %v, want change %s", i, e.Name(), d, want[i])
		}
		if _, ok := d["after"]; !ok {
			t.Errorf("event %d has no after: %v", i, d)
		}
	}
	if after := rec.events[0].Data["after"].(map[string]any); after["guaranteed"] != 1.0 {
		t.Errorf("app_override_set after = %v", after)
	}
	// beta sets no max_connections: the change shows the limit in force (connections.app, 40), as GET does
	for _, side := range []string{"before", "after"} {
		if p := rec.events[4].Data[side].(map[string]any); p["max_connections"] != 40.0 {
			t.Errorf("beta's %s: max_connections %v, want the effective 40", side, p["max_connections"])
		}
	}
}
