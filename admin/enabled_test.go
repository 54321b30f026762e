package admin

import (
	"context"
	"net/http"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestEnableDisableApp: PUT {"enabled": false} refuses the app with app_disabled and keeps its
// policy override; a later policy edit keeps it disabled; {"enabled": true} brings it back
// with the edited policy; DELETE removes both.
func TestEnableDisableApp(t *testing.T) {
	c, _, a, _ := overrideCluster(t)
	put := func(body string) AppView {
		t.Helper()
		w, err := send(a, http.MethodPut, "/rate_limit/apps/alpha", body)
		if err != nil {
			t.Fatalf("PUT %s: %v", body, err)
		}
		return decodeApp(t, w)
	}
	take := func() store.Reason {
		app, _ := c.Limiter().App("alpha")
		return app.Take(context.Background(), 1, 0).Reason
	}

	if v := put(`{"guaranteed":2,"burst":10}`); !v.Policy.Enabled {
		t.Fatalf("after a policy PUT: %+v", v.Policy)
	}
	v := put(`{"enabled":false}`)
	if v.Policy.Enabled || v.Policy.Guaranteed != 2 || v.Policy.Burst != 10 || v.Override["enabled"] != false {
		t.Fatalf("disabled: policy %+v override %v: want disabled with the override's guaranteed 2, burst 10", v.Policy, v.Override)
	}
	if r := take(); r != store.ReasonAppDisabled {
		t.Fatalf("a request of the disabled app: %v, want app_disabled", r)
	}
	if v := put(`{"guaranteed":3,"burst":12}`); v.Policy.Enabled || v.Policy.Guaranteed != 3 {
		t.Fatalf("a policy edit of a disabled app: %+v, want still disabled", v.Policy)
	}
	if v := put(`{"enabled":true}`); !v.Policy.Enabled || v.Policy.Guaranteed != 3 || v.Policy.Burst != 12 {
		t.Fatalf("enabled again: %+v, want enabled with guaranteed 3, burst 12", v.Policy)
	}
	if r := take(); r != store.ReasonNone {
		t.Fatalf("a request after enabling: %v", r)
	}
	put(`{"enabled":false}`)
	w, err := send(a, http.MethodDelete, "/rate_limit/apps/alpha", "")
	if err != nil {
		t.Fatal(err)
	}
	if v := decodeApp(t, w); !v.Policy.Enabled || v.Source != "caddyfile" {
		t.Fatalf("after DELETE: %+v source %s", v.Policy, v.Source)
	}
	if _, err := send(a, http.MethodPut, "/rate_limit/apps/alpha", `{"enabled":"no"}`); err == nil {
		t.Fatal(`{"enabled":"no"} accepted`)
	}
}
