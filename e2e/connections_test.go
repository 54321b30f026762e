package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// otherMax is the max_connections of app "other" in TestFleetConnections: high, so that only
// the cluster's limit refuses it.
const otherMax = 100

// result is the outcome of one request sent by a call.
type result struct {
	status int
	hdr    http.Header
	body   string
	err    error
}

// call is one request in flight from the test to a gateway.
type call struct {
	gw  *gateway
	app string
	ch  chan result // receives exactly one result
}

// send starts GET /bucket/object for app on g; it answers when the gateway rejects it, or when
// the upstream lets it go.
func send(ctx context.Context, client *http.Client, g *gateway, app string) *call {
	c := &call{gw: g, app: app, ch: make(chan result, 1)}
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/bucket/object", nil)
		req.Header.Set("X-App-Id", app)
		resp, err := client.Do(req)
		if err != nil {
			c.ch <- result{err: err}
			return
		}
		body := drain(resp)
		c.ch <- result{status: resp.StatusCode, hdr: resp.Header, body: body}
	}()
	return c
}

// sent is a request sent by sendOne: its call, and its answer if it was refused.
type sent struct {
	c *call // nil when refused
	r result
}

// sendOne sends one request of app to g and waits until it is refused or held upstream.
func sendOne(t *testing.T, ctx context.Context, client *http.Client, u *slowUpstream, g *gateway, app string) (sent, bool) {
	t.Helper()
	c := send(ctx, client, g, app)
	got := settle(t, u, app, u.held(app), []*call{c})
	if r, ok := got[c]; ok {
		return sent{r: r}, false
	}
	return sent{c: c}, true
}

// refused sends one request that must be refused and returns the refusal.
func refused(t *testing.T, ctx context.Context, client *http.Client, u *slowUpstream, g *gateway, app string) result {
	t.Helper()
	s, admitted := sendOne(t, ctx, client, u, g, app)
	if admitted {
		t.Fatalf("gateway %s admitted a request of %s over the limit", g.name, app)
	}
	return s.r
}

// settle waits until each of calls has either answered (a rejection: the upstream holds every
// admitted request) or reached the upstream, i.e. until the upstream holds want requests of
// app. It returns the answers received, by call.
func settle(t *testing.T, u *slowUpstream, app string, heldBefore int64, calls []*call) map[*call]result {
	t.Helper()
	got := map[*call]result{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, c := range calls {
			if _, ok := got[c]; ok {
				continue
			}
			select {
			case r := <-c.ch:
				got[c] = r
			default:
			}
		}
		if int64(len(got))+u.held(app)-heldBefore == int64(len(calls)) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests of %s: %d answered, %d held upstream (before: %d) after 10 s",
				len(calls), app, len(got), u.held(app), heldBefore)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkConnRejection checks that r is a connection-limit rejection with the given reason and
// X-Connection-* headers limit and current (current < 0: not checked), and remaining
// consistent with them (and 0 when full).
func checkConnRejection(t *testing.T, what string, r result, reason string, limit, current int64, full bool) {
	t.Helper()
	if r.err != nil {
		t.Errorf("%s: %v", what, r.err)
		return
	}
	if r.status != http.StatusTooManyRequests {
		t.Errorf("%s: status %d (body %q), want 429", what, r.status, r.body)
		return
	}
	rej, err := parseRejection(answer{StatusCode: r.status, Header: r.hdr}, r.body)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if rej.Reason != reason {
		t.Errorf("%s: reason %q, want %q", what, rej.Reason, reason)
	}
	hl, hc, hr := r.hdr.Get("X-Connection-Limit"), r.hdr.Get("X-Connection-Current"), r.hdr.Get("X-Connection-Remaining")
	l, errL := strconv.ParseInt(hl, 10, 64)
	c, errC := strconv.ParseInt(hc, 10, 64)
	rem, errR := strconv.ParseInt(hr, 10, 64)
	if errL != nil || errC != nil || errR != nil {
		t.Errorf("%s: X-Connection-Limit %q, -Current %q, -Remaining %q: want integers", what, hl, hc, hr)
		return
	}
	if l != limit {
		t.Errorf("%s: X-Connection-Limit %d, want %d", what, l, limit)
	}
	if current >= 0 && c != current {
		t.Errorf("%s: X-Connection-Current %d, want %d (the fleet-wide count)", what, c, current)
	}
	if rem != max(l-c, 0) || full && rem != 0 {
		t.Errorf("%s: X-Connection-Remaining %d with limit %d and current %d, want max(limit - current, 0)%s",
			what, rem, l, c, map[bool]string{true: " = 0", false: ""}[full])
	}
	if r.hdr.Get("Retry-After") == "" {
		t.Errorf("%s: no Retry-After on a rejection", what)
	}
}

// TestFleetConnections: a fleet-wide in-flight limit. Two Caddy processes share one
// redis-server; app "slow" may have appMax requests in flight fleet-wide, the cluster
// clusterMax. The upstream holds every request it gets until the test releases it.
//
// Each gateway holds connection slots leased from Redis (docs/design.md, "Connection slots"),
// and Redis grants a holding only while the live holders stay within the limit: even a burst
// that reaches both gateways at once puts exactly the limit in flight.
func TestFleetConnections(t *testing.T) {
	requireCaddy(t)
	const (
		appMax     = 4  // max_connections of app "slow" (app "other": otherMax)
		clusterMax = 10 // connections.cluster
		perGateway = 8  // burst size per gateway, 2 × appMax
	)
	addr, _ := redistest.Standalone(t)
	u := newSlowUpstream(t)
	site := fmt.Sprintf(`	rate_limit {
		headers both
		cluster conns
		key {http.request.header.X-App-Id}
		app slow {
			guaranteed 100000
			max_connections %d
		}
		app solo {
			guaranteed 100000
			max_connections 1
		}
		app other {
			guaranteed 100000
			max_connections %d
		}
		connections {
			cluster %d
		}
		redis {
			address %s
			key_prefix e2e-conn
		}
	}
	reverse_proxy %s`, appMax, otherMax, clusterMax, addr, u.hostPort())
	a, b := startGateway(t, "a", site), startGateway(t, "b", site)
	gws := []*gateway{a, b}
	f := newFleet(t, addr, "e2e-conn", "conns")
	f.waitLive(a, b)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := newClient(t, 0, 64) // held requests last as long as the test needs; ctx bounds them
	var pending []*call           // admitted, held upstream: answer when released

	// 0. An app one gateway has never seen: the fleet's count should apply to it there too.
	soloA, ok := sendOne(t, ctx, client, u, a, "solo")
	if !ok {
		t.Fatalf("gateway a refused the first request of app solo: %+v", soloA.r)
	}
	f.sync(a, b)
	soloB, admitted := sendOne(t, ctx, client, u, b, "solo")
	if admitted {
		// Slots are leased from Redis: a holds the app's only slot, so b's lease gets none.
		t.Fatalf("gateway b admitted a second request of app solo (max_connections 1) while gateway a held its only slot")
	}
	checkConnRejection(t, "solo, first request at b", soloB.r, "app_limit_exceeded", 1, 1, true)
	u.releaseAll()
	for _, c := range []*call{soloA.c, soloB.c} {
		if c != nil {
			<-c.ch
		}
	}
	u.hold()
	f.sync(a, b) // the solo counts are back to 0 everywhere

	// 1. A burst of 2 × appMax requests at each gateway at once.
	var calls []*call
	for i := 0; i < perGateway; i++ {
		for _, g := range gws {
			calls = append(calls, send(ctx, client, g, "slow"))
		}
	}
	got := settle(t, u, "slow", 0, calls)
	inflight := u.held("slow")
	rejectedBy := map[*gateway]int{}
	for _, c := range calls {
		r, ok := got[c]
		if !ok {
			pending = append(pending, c)
			continue
		}
		rejectedBy[c.gw]++
		checkConnRejection(t, "burst rejection by "+c.gw.name, r, "app_limit_exceeded", appMax, -1, true)
	}
	t.Logf("burst of %d requests per gateway: %d in flight fleet-wide (limit %d); admitted by a %d, by b %d",
		perGateway, inflight, appMax, perGateway-rejectedBy[a], perGateway-rejectedBy[b])
	if inflight != appMax {
		t.Fatalf("%d in flight after the burst, want exactly the limit %d", inflight, appMax)
	}
	for _, g := range gws {
		if n := perGateway - rejectedBy[g]; n > appMax {
			t.Errorf("gateway %s alone admitted %d > limit %d", g.name, n, appMax)
		}
	}

	// 2. The slots the gateways hold in Redis cover what is in flight and stay within the
	// limits; every further request is refused, with the fleet-wide count.
	f.sync(a, b)
	if sum := sumCounts(f.slotHoldings(f.appSlotsKey("slow"))); sum < inflight || sum > appMax {
		t.Errorf("Redis %s holds %d slots, want between %d in flight and the limit %d", f.appSlotsKey("slow"), sum, inflight, appMax)
	}
	if sum := sumCounts(f.slotHoldings(f.clusterSlotsKey())); sum < inflight || sum > clusterMax {
		t.Errorf("Redis %s holds %d slots, want between %d in flight and the limit %d", f.clusterSlotsKey(), sum, inflight, clusterMax)
	}
	var local int64
	for _, g := range gws {
		v, _, err := g.metric("caddy_rate_limit_connections", `cluster="conns"`, `app="slow"`)
		if err != nil {
			t.Fatal(err)
		}
		local += int64(v)
	}
	if local != inflight {
		t.Errorf("Σ caddy_rate_limit_connections{app=slow} of the gateways = %d, want %d", local, inflight)
	}
	for _, g := range gws {
		for i := 0; i < 3; i++ {
			r := refused(t, ctx, client, u, g, "slow")
			checkConnRejection(t, "after sync, gateway "+g.name, r, "app_limit_exceeded", appMax, inflight, true)
		}
	}
	if n := u.held("slow"); n != inflight {
		t.Fatalf("upstream holds %d requests of slow, want still %d", n, inflight)
	}

	// 3. The cluster limit, fed one request per sync, alternating gateways: exactly
	// clusterMax - inflight more requests (of another app) get in, then both refuse.
	wantOther := clusterMax - inflight
	var admittedOther int64
	var refusal result
	for i := 0; i < clusterMax+2; i++ {
		g := gws[i%2]
		c := send(ctx, client, g, "other")
		got := settle(t, u, "other", admittedOther, []*call{c})
		if r, ok := got[c]; ok {
			refusal = r
			break
		}
		pending = append(pending, c)
		admittedOther++
		f.sync(a, b)
	}
	t.Logf("cluster limit %d: %d of slow + %d of other admitted one per sync", clusterMax, inflight, admittedOther)
	if admittedOther != wantOther {
		t.Errorf("admitted %d requests of other one per sync, want exactly clusterMax - in flight = %d", admittedOther, wantOther)
	}
	checkClusterRejection(t, "cluster full", refusal, clusterMax)
	for _, g := range gws {
		checkClusterRejection(t, "cluster full, gateway "+g.name, refused(t, ctx, client, u, g, "other"), clusterMax)
	}

	// 4. Release: every held request completes, every counter goes back to 0.
	u.releaseAll()
	for _, c := range pending {
		select {
		case r := <-c.ch:
			if r.err != nil || r.status != http.StatusOK {
				t.Errorf("held request of %s on %s: status %d err %v body %q", c.app, c.gw.name, r.status, r.err, r.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("held request of %s on %s did not complete within 10 s of the release", c.app, c.gw.name)
		}
	}
	for _, g := range gws {
		zero := func(v float64) bool { return v == 0 }
		g.waitMetric(5*time.Second, zero, "caddy_rate_limit_connections", `cluster="conns"`, `app="slow"`)
		g.waitMetric(5*time.Second, zero, "caddy_rate_limit_connections", `cluster="conns"`, `app="other"`)
		g.waitMetric(5*time.Second, zero, "caddy_rate_limit_cluster_connections", `cluster="conns"`)
		peak, _, _ := g.metric("caddy_rate_limit_cluster_connections_peak", `cluster="conns"`)
		rej, _, _ := g.metric("caddy_rate_limit_connections_rejected_total", `cluster="conns"`, `app="slow"`)
		t.Logf("gateway %s after release: cluster peak %g, slow rejected %g", g.name, peak, rej)
	}
	// Idle holdings go back to Redis within a few trims (1 s each), so that another instance
	// can use the whole limit; where the limit is at least 4 × the live instances (other's 100,
	// the cluster's 10), each gateway keeps one slot for a minute, so that sparse requests ask
	// Redis nothing (docs/design.md, "Connection slots").
	for _, scope := range []struct {
		key  string
		keep int64
	}{{f.appSlotsKey("slow"), 0}, {f.appSlotsKey("other"), 1}, {f.clusterSlotsKey(), 1}} {
		waitUntil(t, "the idle holdings of "+scope.key+" to go back", 10*time.Second, func() bool {
			for _, n := range f.slotHoldings(scope.key) {
				if n > scope.keep {
					return false
				}
			}
			return true
		})
	}

	// 5. A gateway killed while it holds requests: its heartbeat goes (InstanceTTL, 3 s), its
	// slots stop counting, and the other gateway admits up to the full limit again.
	u.hold()
	calls = nil
	for i := 0; i <= appMax; i++ {
		calls = append(calls, send(ctx, client, a, "slow"))
	}
	got = settle(t, u, "slow", 0, calls)
	if n := u.held("slow"); n != appMax || len(got) != 1 {
		t.Fatalf("gateway a alone, %d requests: %d held, %d refused; want %d and 1", appMax+1, n, len(got), appMax)
	}
	f.sync(a, b)
	checkConnRejection(t, "b while a holds the limit", refused(t, ctx, client, u, b, "slow"), "app_limit_exceeded", appMax, appMax, true)

	a.kill()
	killed := time.Now()
	deadline := killed.Add(15 * time.Second)
	for {
		gone := true
		hb, _ := f.heartbeats()
		for id := range hb {
			if instanceOf(id, a) {
				gone = false
			}
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed gateway's heartbeat is still in Redis 15 s after SIGKILL")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the killed gateway's heartbeat left Redis %.1fs after SIGKILL (InstanceTTL 3 s)", time.Since(killed).Seconds())
	waitUntil(t, "the upstream to drop the killed gateway's requests", 10*time.Second,
		func() bool { return u.held("slow") == 0 })
	f.sync(b)
	calls = nil
	for i := 0; i <= appMax; i++ {
		calls = append(calls, send(ctx, client, b, "slow"))
	}
	got = settle(t, u, "slow", 0, calls)
	if n := u.held("slow"); n != appMax || len(got) != 1 {
		t.Fatalf("after the kill, %d requests at b: %d held, %d refused; want the full limit %d and 1", appMax+1, n, len(got), appMax)
	}
	for _, r := range got {
		checkConnRejection(t, "b at the full limit after the kill", r, "app_limit_exceeded", appMax, appMax, true)
	}
	u.releaseAll()
}

// checkClusterRejection checks a cluster_limit_exceeded rejection; its X-Connection-* headers
// must describe the cluster's limit (clusterMax, all of it in use), the limit that refused it.
func checkClusterRejection(t *testing.T, what string, r result, clusterMax int64) {
	t.Helper()
	checkConnRejection(t, what, r, "cluster_limit_exceeded", clusterMax, clusterMax, true)
}

func sumCounts(m map[string]int64) int64 {
	var s int64
	for _, n := range m {
		s += n
	}
	return s
}

// waitUntil polls cond until it holds, failing the test after timeout.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
