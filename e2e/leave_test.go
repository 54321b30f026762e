package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestStoppedGatewayLeavesTheFleet: a gateway stopped with SIGTERM takes itself out of the
// fleet's live set with its last report (store.Report.Leaving), so the gateway that stays sees
// one live instance at its next report, within a sync interval (100 ms), rather than once the
// stopped one's heartbeat has expired (store.InstanceTTL, 3 s): its shares and rescue limits
// are for the fleet that is there.
func TestStoppedGatewayLeavesTheFleet(t *testing.T) {
	requireCaddy(t)
	addr, _ := redistest.Standalone(t)
	site := fmt.Sprintf(`	rate_limit {
		cluster leave
		key {http.request.header.X-App-Id}
		app a {
			guaranteed 1000
		}
		redis {
			address %s
			key_prefix e2e-leave
		}
	}
	respond "ok"`, addr)
	a, b := startGateway(t, "a", site), startGateway(t, "b", site)
	f := newFleet(t, addr, "e2e-leave", "leave")
	f.waitLive(a, b)
	live := func() int {
		var v struct {
			LiveInstances int `json:"live_instances"`
		}
		if status, _, body := a.adminJSON("GET", "/rate_limit/", &v); status != 200 {
			t.Fatalf("GET /rate_limit/ on gateway a: %d %s", status, body)
		}
		return v.LiveInstances
	}
	deadline := time.Now().Add(10 * time.Second)
	for live() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("gateway a sees %d live instances 10 s after both reported, want 2", live())
		}
		time.Sleep(10 * time.Millisecond)
	}

	b.terminate()
	stopped := time.Now()
	// Its heartbeat is expired already (the next report or slot lease prunes it).
	hb, err := f.heartbeats()
	if err != nil {
		t.Fatal(err)
	}
	expired := f.redisNow() - float64(store.InstanceTTL.Microseconds())
	for id, ts := range hb {
		if instanceOf(id, b) && ts >= expired {
			t.Errorf("the stopped gateway %s still has a live heartbeat after it exited: %v", id, hb)
		}
	}
	// One sync interval, plus what a report and an admin request take on a loaded machine;
	// without the leaving report it takes the heartbeat's expiry, 3 s.
	const within = 100*time.Millisecond + 250*time.Millisecond
	for {
		n := live()
		if n == 1 {
			t.Logf("gateway a sees 1 live instance %v after gateway b exited", time.Since(stopped).Round(time.Millisecond))
			break
		}
		if time.Since(stopped) > within {
			a.dumpLog()
			t.Fatalf("gateway a sees %d live instances %v after gateway b exited, want 1 within %v", n, time.Since(stopped).Round(time.Millisecond), within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
