package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// overridesSite is the site of the override tests: unknown apps rejected, capacity 10000 (9000
// to give out), "quota" generous, "tenant" modest, "borrower" small with max_borrow.
func overridesSite(addr, prefix string) string {
	return fmt.Sprintf(`	rate_limit {
		cluster e2e-overrides
		key {http.request.header.X-App-Id}
		unknown_app reject
		capacity 10000
		app quota {
			guaranteed 1000
			burst 1000
		}
		app borrower {
			guaranteed 50
			burst 50
			max_borrow 200
		}
		redis {
			address %s
			key_prefix %s
		}
	}
	respond "ok"`, addr, prefix)
}

// overridesFleet starts two gateways, g1 and g2, with overridesSite on the redis-server at addr
// under prefix, and waits until each counts both live.
func overridesFleet(t *testing.T, addr, prefix string) (g1, g2 *gateway, f *fleet, site string) {
	t.Helper()
	site = overridesSite(addr, prefix)
	g1, g2 = startGateway(t, "g1", site), startGateway(t, "g2", site)
	f = newFleet(t, addr, prefix, "e2e-overrides")
	f.waitLive(g1, g2)
	return g1, g2, f, site
}

// appInfo is the part of GET /rate_limit/apps/<id> these tests read.
type appInfo struct {
	Policy   map[string]any `json:"policy"`
	Source   string         `json:"source"`
	Override map[string]any `json:"override"`
}

func (g *gateway) app(id string) (int, appInfo) {
	g.t.Helper()
	var a appInfo
	status, _, _ := g.adminJSON("GET", "/rate_limit/apps/"+id, &a)
	return status, a
}

// waitApp polls g's view of app id until cond holds (bounded).
func waitApp(t *testing.T, g *gateway, id string, timeout time.Duration, cond func(status int, a appInfo) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		status, a := g.app(id)
		if cond(status, a) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s, app %s: %d %+v after %v", g.name, id, status, a, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// appsPolicies is every app's policy and source on g, for before/after comparisons.
func appsPolicies(t *testing.T, g *gateway) string {
	t.Helper()
	var v struct {
		Apps []struct {
			ID     string         `json:"id"`
			Policy map[string]any `json:"policy"`
			Source string         `json:"source"`
		} `json:"apps"`
	}
	if status, _, body := g.adminJSON("GET", "/rate_limit/apps", &v); status != 200 {
		t.Fatalf("GET /rate_limit/apps: %d %s", status, body)
	}
	b, _ := json.Marshal(v.Apps)
	return string(b)
}

// TestOverridesFleet: overrides made through one gateway's admin API are enforced by the
// other; DELETE restores the config exactly; an app created through the API is enforced; bad
// input changes nothing on either gateway; an override survives a restart.
func TestOverridesFleet(t *testing.T) {
	requireCaddy(t)
	addr, _ := redistest.Standalone(t)
	g1, g2, f, site := overridesFleet(t, addr, "e2e-overrides")
	loaded := appsPolicies(t, g2)
	if r := g2.send("GET", "/", "quota", ""); r.status != 200 {
		t.Fatalf("quota before: %d %s", r.status, r.body)
	}

	// 1. An override through g1 is enforced by g2: quota down to 1/s, burst 2.
	status, body := g1.adminDo("PUT", "/rate_limit/apps/quota", "application/json", `{"guaranteed": 1, "burst": 2}`)
	if status != 200 || !strings.Contains(body, `"source":"override"`) {
		t.Fatalf("PUT on g1: %d %s", status, body)
	}
	waitApp(t, g2, "quota", time.Second, func(_ int, a appInfo) bool {
		return a.Source == "override" && a.Policy["guaranteed"] == 1.0 && a.Policy["burst"] == 2.0
	})
	waitStatus(t, g2, "quota", 429, "app_exhausted", 5*time.Second)

	// 2. DELETE through g2 restores the loaded policy exactly, on both.
	if status, body := g2.adminDo("DELETE", "/rate_limit/apps/quota", "", ""); status != 200 {
		t.Fatalf("DELETE on g2: %d %s", status, body)
	}
	for _, g := range []*gateway{g1, g2} {
		waitApp(t, g, "quota", time.Second, func(_ int, a appInfo) bool { return a.Source == "caddyfile" })
		if got := appsPolicies(t, g); got != loaded {
			t.Fatalf("gateway %s after DELETE:\n%s\nwant the loaded\n%s", g.name, got, loaded)
		}
	}
	waitStatus(t, g2, "quota", 200, "", 5*time.Second)

	// 3. An app created through the API exists fleet-wide, with its quota.
	if r := g2.send("GET", "/", "tenant-9", ""); r.status != 403 {
		t.Fatalf("tenant-9 before it exists: %d %s", r.status, r.body)
	}
	if status, body := g1.adminDo("PUT", "/rate_limit/apps/tenant-9", "application/json", `{"guaranteed": 5, "burst": 5}`); status != 200 {
		t.Fatalf("PUT tenant-9: %d %s", status, body)
	}
	waitStatus(t, g2, "tenant-9", 200, "", time.Second)
	waitStatus(t, g2, "tenant-9", 429, "app_exhausted", 5*time.Second)
	if _, a := g2.app("tenant-9"); a.Source != "api" {
		t.Fatalf("tenant-9 on g2: %+v", a)
	}

	// 4. Bad input changes nothing, on either gateway.
	before1, before2 := appsPolicies(t, g1), appsPolicies(t, g2)
	for _, tc := range []struct {
		name, path, ctype, body string
		status                  int
	}{
		{"garbage JSON", "/rate_limit/apps/quota", "application/json", `{"guaranteed": 5,,`, 400},
		{"burst < guaranteed", "/rate_limit/apps/quota", "application/json", `{"guaranteed": 500, "burst": 10}`, 400},
		{"over (1 - reserved_ratio) × capacity", "/rate_limit/apps/quota", "application/json", `{"guaranteed": 9000, "burst": 9000}`, 400},
		{"invalid id", "/rate_limit/apps/no%20spaces", "application/json", `{"guaranteed": 5}`, 400},
		{"huge body", "/rate_limit/apps/quota", "application/json", `{"guaranteed": 5` + strings.Repeat(" ", 1<<20) + `}`, 413},
		{"not JSON", "/rate_limit/apps/quota", "text/plain", `{"guaranteed": 5}`, 415},
		{"cluster capacity below the guarantees", "/rate_limit/clusters/e2e-overrides", "application/json", `{"capacity": 10}`, 400},
	} {
		status, body := g1.adminDo("PUT", tc.path, tc.ctype, tc.body)
		if status != tc.status || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want %d with an error", tc.name, status, body, tc.status)
		}
		if tc.status == 400 && strings.HasPrefix(tc.name, "burst") && !strings.Contains(body, `"fields":{"burst":`) {
			t.Errorf("%s: the answer does not name the field: %s", tc.name, body)
		}
	}
	f.sync(g1, g2)
	if a1, a2 := appsPolicies(t, g1), appsPolicies(t, g2); a1 != before1 || a2 != before2 {
		t.Fatalf("bad input changed the apps:\n%s\n%s", a1, a2)
	}

	// 5. An override survives a restart: g2 goes, g3 comes with the same config.
	if status, body := g1.adminDo("PUT", "/rate_limit/apps/quota", "application/json", `{"priority": 2}`); status != 200 {
		t.Fatalf("PUT priority: %d %s", status, body)
	}
	g2.stop()
	g3 := startGateway(t, "g3", site)
	waitApp(t, g3, "quota", 2*time.Second, func(_ int, a appInfo) bool {
		return a.Source == "override" && a.Policy["priority"] == 2.0 && a.Policy["guaranteed"] == 1000.0
	})

	// Every change is in g1's log with the remote address, under the admin API's logger name.
	b, err := os.ReadFile(g1.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"logger":"admin.api.rate_limit","msg":"rate_limit: app_override_set through the admin API"`,
		`"remote_addr":"127.0.0.1:`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("g1's log lacks %q", want)
		}
	}
}

// TestBorrowingE2E: an app with max_borrow gets beyond its burst from the cluster's spare
// capacity, is refused with borrow_limit_exceeded once it borrowed max_borrow, and repays its
// debt from the refill it leaves unused.
func TestBorrowingE2E(t *testing.T) {
	requireCaddy(t)
	addr, _ := redistest.Standalone(t)
	g := startGateway(t, "g1", overridesSite(addr, "e2e-borrow"))
	f := newFleet(t, addr, "e2e-borrow", "e2e-overrides")
	f.waitLive(g)

	// Burst 50 and 50/s: 300 requests as fast as one client sends them get 50 cost tokens + the
	// refill; borrowing adds 200 more (GET / is an S3 LIST, 3 tokens: the count is in cost
	// tokens).
	start := time.Now()
	allowed, reasons := 0, map[string]int{}
	for range 300 {
		r := g.send("GET", "/", "borrower", "")
		if r.status == 200 {
			allowed++
			continue
		}
		var rej rejection
		_ = json.Unmarshal([]byte(r.body), &rej)
		reasons[rej.Reason]++
	}
	refill := time.Since(start).Seconds()*50 + 1
	var info struct {
		Cost int64 `json:"cost"` // admitted cost tokens
	}
	g.adminJSON("GET", "/rate_limit/apps/borrower", &info)
	t.Logf("admitted %d of 300 requests, %d cost tokens in %v (burst 50, refill about %.0f, max_borrow 200); rejections %v",
		allowed, info.Cost, time.Since(start), refill, reasons)
	if float64(info.Cost) < 50+200-2 || float64(info.Cost) > 50+200+refill {
		t.Fatalf("admitted cost %d: want burst 50 + max_borrow 200 (+ at most the refill, %.0f)", info.Cost, refill)
	}
	if reasons["borrow_limit_exceeded"] == 0 {
		t.Fatalf("no borrow_limit_exceeded refusal after borrowing max_borrow: %v", reasons)
	}
	l2 := f.prefix + ":{e2e-overrides/borrower}:l2"
	debt, err := f.rdb.HGet(context.Background(), l2, "debt").Float64()
	if err != nil || debt <= 0 {
		t.Fatalf("debt after borrowing: %v %v", debt, err)
	}
	// Repayment: with a request every 200 ms (15 tokens/s of the 50/s refill), L2's bucket of 50
	// is full after about 1.5 s, and the 35/s beyond it pay the 1.2 × 200 = 240 of debt in about
	// 7 s; a lease refills (and repays) the elapsed time, so keep asking until the stored debt
	// is 0.
	deadline := time.Now().Add(20 * time.Second)
	for {
		g.send("GET", "/", "borrower", "")
		d, err := f.rdb.HGet(context.Background(), l2, "debt").Float64()
		if err == nil && d == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("debt %v after 20 s (started at %v)", d, debt)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestOverridePropagation measures how long an override set through one gateway takes to be
// in force on another (its admin API shows it), over 100 changes. The figures are logged (see
// docs/admin-api.md), not asserted; every change must arrive.
func TestOverridePropagation(t *testing.T) {
	requireCaddy(t)
	addr, _ := redistest.Standalone(t)
	g1, g2, _, _ := overridesFleet(t, addr, "e2e-propagation")
	var took []time.Duration
	for i := range 100 {
		want := float64(1000 + i)
		start := time.Now()
		if status, body := g1.adminDo("PUT", "/rate_limit/apps/quota", "application/json",
			fmt.Sprintf(`{"burst": %v}`, want)); status != 200 {
			t.Fatalf("PUT %d: %d %s", i, status, body)
		}
		waitApp(t, g2, "quota", 10*time.Second, func(_ int, a appInfo) bool { return a.Policy["burst"] == want })
		took = append(took, time.Since(start))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("override propagation over %d changes (PUT on g1 until g2's GET shows it, polled every 5 ms): "+
		"p50 %v, p90 %v, p99 %v, max %v", len(took), took[49], took[89], took[98], took[99])
}

// TestOverridesSurviveRedisDataLoss: Redis restarted without its data (no persistence) does not
// end the fleet's overrides and operator emergency: the gateways enforce them from memory, and
// the first to see their version go backwards writes them back; otherwise both would end
// silently.
func TestOverridesSurviveRedisDataLoss(t *testing.T) {
	requireCaddy(t)
	addr, srv := redistest.Standalone(t)
	const prefix = "e2e-loss"
	g1, g2, _, _ := overridesFleet(t, addr, prefix)
	if status, body := g1.adminDo("PUT", "/rate_limit/apps/quota", "application/json", `{"guaranteed": 1, "burst": 2}`); status != 200 {
		t.Fatalf("PUT on g1: %d %s", status, body)
	}
	if status, body := g1.adminDo("POST", "/rate_limit/emergency/activate", "application/json", `{"reason":"drill"}`); status != 200 {
		t.Fatalf("emergency on g1: %d %s", status, body)
	}
	overridden := func(_ int, a appInfo) bool { return a.Source == "override" && a.Policy["guaranteed"] == 1.0 }
	emergency := func(g *gateway) bool {
		var e struct {
			Active bool   `json:"active"`
			Source string `json:"source"`
		}
		g.adminJSON("GET", "/rate_limit/emergency", &e)
		return e.Active && e.Source == "operator"
	}
	for _, g := range []*gateway{g1, g2} {
		waitApp(t, g, "quota", 5*time.Second, overridden)
		waitUntil(t, "the emergency on "+g.name, 5*time.Second, func() bool { return emergency(g) })
	}

	srv.Stop()
	srv.Start() // empty: no persistence
	waitUntil(t, "the overrides written back to Redis", 15*time.Second, func() bool {
		n, err := srv.Do("EXISTS", prefix+":{e2e-overrides}:cfg")
		return err == nil && n == int64(1)
	})
	for _, g := range []*gateway{g1, g2} {
		waitApp(t, g, "quota", 5*time.Second, overridden)
		waitUntil(t, "the emergency on "+g.name+" after the loss", 5*time.Second, func() bool { return emergency(g) })
	}
	// Whichever gateway noticed first wrote them back and said so.
	found := 0
	for _, g := range []*gateway{g1, g2} {
		for _, line := range logLines(t, g) {
			if strings.Contains(line, "lost the cluster's overrides") {
				found++
			}
		}
	}
	if found == 0 {
		t.Errorf("no gateway logged the lost overrides")
	}
}
