package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// adminPost POSTs body (with the content type; "" sends none) to the gateway's admin endpoint
// and returns the status and the body.
func (g *gateway) adminPost(path, contentType, body string) (int, string) {
	g.t.Helper()
	return g.adminDo(http.MethodPost, path, contentType, body)
}

// adminDo sends method path with body (and the content type; "" sends none) to the gateway's
// admin endpoint and returns the status and the body.
func (g *gateway) adminDo(method, path, contentType, body string) (int, string) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.admin+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, drain(resp)
}

// emergencyState is GET /rate_limit/emergency.
type emergencyState struct {
	Active bool       `json:"active"`
	Source string     `json:"source"`
	Reason string     `json:"reason"`
	Until  *time.Time `json:"until"`
}

// waitStatus sends requests for app to g until one answers status (and, for a rejection, the
// reason), within timeout; it fails the test with the last answer otherwise.
func waitStatus(t *testing.T, g *gateway, app string, status int, reason string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := g.send("GET", "/bucket/key", app, "")
		if r.status == status {
			if reason == "" {
				return
			}
			var rej rejection
			if json.Unmarshal([]byte(r.body), &rej) == nil && rej.Reason == reason {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s, app %s: %d %q after %v; want %d %s", g.name, app, r.status, r.body, timeout, status, reason)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEmergencyOperatorFleet: an operator emergency activated through one gateway's admin API
// applies fleet-wide without capacity: the other gateway blocks the priority-3 app
// (emergency_blocked) within a second while priority 0 is served, and shows the emergency as
// the operator's; deactivating it through the first gateway lets priority 3 in again.
func TestEmergencyOperatorFleet(t *testing.T) {
	requireCaddy(t)
	addr, _ := redistest.Standalone(t)
	site := fmt.Sprintf(`	rate_limit {
		cluster e2e-emergency
		key {http.request.header.X-App-Id}
		unknown_app reject
		app low {
			guaranteed 1000
			burst 2000
			priority 3
		}
		app vip {
			guaranteed 1000
			burst 2000
			priority 0
		}
		redis {
			address %s
			key_prefix e2e-emergency
		}
	}
	respond "ok"`, addr)
	g1, g2 := startGateway(t, "g1", site), startGateway(t, "g2", site)
	f := newFleet(t, addr, "e2e-emergency", "e2e-emergency")
	f.waitLive(g1, g2)
	for _, app := range []string{"low", "vip"} {
		if r := g2.send("GET", "/bucket/key", app, ""); r.status != 200 {
			t.Fatalf("%s before the emergency: %d %q", app, r.status, r.body)
		}
	}

	// A body that is not JSON changes nothing.
	if status, body := g1.adminPost("/rate_limit/emergency/activate", "text/plain", `{"reason":"x"}`); status != 415 {
		t.Fatalf("activate with text/plain: %d %s", status, body)
	}
	if r := g2.send("GET", "/bucket/key", "low", ""); r.status != 200 {
		t.Fatalf("low after a refused activate: %d %q", r.status, r.body)
	}

	status, body := g1.adminPost("/rate_limit/emergency/activate", "application/json",
		`{"reason": "e2e drill", "duration": "10m"}`)
	var on emergencyState
	if status != 200 || json.Unmarshal([]byte(body), &on) != nil || !on.Active || on.Source != "operator" ||
		on.Reason != "e2e drill" || on.Until == nil {
		t.Fatalf("activate on g1: %d %s", status, body)
	}
	waitStatus(t, g2, "low", 429, "emergency_blocked", time.Second)
	if r := g2.send("GET", "/bucket/key", "vip", ""); r.status != 200 {
		t.Fatalf("P0 app on g2 in the emergency: %d %q", r.status, r.body)
	}
	if r := g1.send("GET", "/bucket/key", "low", ""); r.status != 429 {
		t.Fatalf("P3 app on g1 (where it was activated) in the emergency: %d %q", r.status, r.body)
	}
	var seen emergencyState
	if status, _, body := g2.adminJSON("GET", "/rate_limit/emergency", &seen); status != 200 || !seen.Active ||
		seen.Source != "operator" || seen.Reason != "e2e drill" || seen.Until == nil || !seen.Until.Equal(*on.Until) {
		t.Fatalf("GET /rate_limit/emergency on g2: %d %s", status, body)
	}

	status, body = g1.adminPost("/rate_limit/emergency/deactivate", "", "")
	var off emergencyState
	if status != 200 || json.Unmarshal([]byte(body), &off) != nil || off.Active {
		t.Fatalf("deactivate on g1: %d %s", status, body)
	}
	waitStatus(t, g2, "low", 200, "", time.Second)
	if status, _, body := g2.adminJSON("GET", "/rate_limit/emergency", &seen); status != 200 || seen.Active {
		t.Fatalf("GET /rate_limit/emergency on g2 after deactivate: %d %s", status, body)
	}

	// Every change is in the log of the gateway it was made on.
	b, err := os.ReadFile(g1.logPath)
	if err != nil {
		t.Fatal(err)
	}
	logs := string(b)
	for _, want := range []string{"operator emergency activated", "operator emergency deactivated", `"remote_addr":"127.0.0.1:`} {
		if !strings.Contains(logs, want) {
			t.Errorf("g1's log lacks %q", want)
		}
	}
}
