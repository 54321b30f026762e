package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// waitRefusal polls g with app's requests until one gets status with reason in its body
// (bounded), and returns how long that took.
func waitRefusal(t *testing.T, g *gateway, app string, status int, reason string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r := g.send("GET", "/", app, "")
		if r.status == status && strings.Contains(r.body, reason) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("gateway %s, app %s: %d %s after %v, want %d %s", g.name, app, r.status, r.body, timeout, status, reason)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDisableAppFleetWide: an app disabled through one gateway's admin API is refused with 403
// app_disabled by the other within a second, stays disabled across a reload and a restart,
// keeps its quota override, and comes back when enabled; `disabled` in the Caddyfile does the
// same for a configured app.
func TestDisableAppFleetWide(t *testing.T) {
	requireCaddy(t)
	addr, _ := redistest.Standalone(t)
	g1, g2, _, site := overridesFleet(t, addr, "e2e-disable")
	if r := g2.send("GET", "/", "quota", ""); r.status != 200 {
		t.Fatalf("quota before: %d %s", r.status, r.body)
	}

	if status, body := g1.adminDo("PUT", "/rate_limit/apps/quota", "application/json", `{"guaranteed": 500}`); status != 200 {
		t.Fatalf("PUT guaranteed: %d %s", status, body)
	}
	if status, body := g1.adminDo("PUT", "/rate_limit/apps/quota", "application/json", `{"enabled": false}`); status != 200 ||
		!strings.Contains(body, `"enabled":false`) || !strings.Contains(body, `"guaranteed":500`) {
		t.Fatalf("PUT enabled false: %d %s", status, body)
	}
	took := waitRefusal(t, g2, "quota", 403, `"reason":"app_disabled"`, time.Second)
	t.Logf("g2 refuses the disabled app %v after the PUT on g1", took)
	if r := g2.send("GET", "/", "borrower", ""); r.status != 200 {
		t.Fatalf("another app while quota is disabled: %d %s", r.status, r.body)
	}

	// The change made through g1 is in the fleet's audit log, read through g2.
	var audit struct {
		Entries []struct {
			Instance string         `json:"instance"`
			Remote   string         `json:"remote_addr"`
			Route    string         `json:"route"`
			Change   string         `json:"change"`
			After    map[string]any `json:"after"`
		} `json:"entries"`
	}
	if status, _, body := g2.adminJSON("GET", "/rate_limit/audit?limit=5", &audit); status != 200 || len(audit.Entries) != 2 {
		t.Fatalf("g2's audit: %d %s", status, body)
	}
	if e := audit.Entries[0]; e.Route != "PUT /rate_limit/apps/quota" || e.Change != "app_override_set" ||
		e.After["enabled"] != false || !strings.HasPrefix(e.Remote, "127.0.0.1:") || e.Instance == "" {
		t.Fatalf("g2's newest audit entry: %+v", e)
	}

	// A reload and a restart keep it disabled (the override lives in Redis).
	g2.reload(site)
	waitRefusal(t, g2, "quota", 403, "app_disabled", 2*time.Second)
	g1.stop()
	g3 := startGateway(t, "g3", site)
	waitRefusal(t, g3, "quota", 403, "app_disabled", 2*time.Second)

	// Enabled again, with the quota override it kept.
	if status, body := g3.adminDo("PUT", "/rate_limit/apps/quota", "application/json", `{"enabled": true}`); status != 200 ||
		!strings.Contains(body, `"enabled":true`) || !strings.Contains(body, `"guaranteed":500`) {
		t.Fatalf("PUT enabled true: %d %s", status, body)
	}
	waitRefusal(t, g2, "quota", 200, "", time.Second)

	// `disabled` in the Caddyfile.
	g2.reload(strings.Replace(site, "app borrower {", "app borrower {\n\t\t\tdisabled", 1))
	if r := g2.send("GET", "/", "borrower", ""); r.status != 403 || !strings.Contains(r.body, "app_disabled") {
		t.Fatalf("borrower disabled in the Caddyfile: %d %s", r.status, r.body)
	}
}
