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
	// liveSeen waits until gateway a reports want live instances and returns how long that took;
	// it fails the test after within.
	liveSeen := func(want int, within time.Duration) time.Duration {
		start := time.Now()
		for {
			var v struct {
				LiveInstances int `json:"live_instances"`
			}
			if status, _, body := a.adminJSON("GET", "/rate_limit/", &v); status != 200 {
				t.Fatalf("GET /rate_limit/ on gateway a: %d %s", status, body)
			}
			if v.LiveInstances == want {
				return time.Since(start)
			}
			if time.Since(start) > within {
				a.dumpLog()
				t.Fatalf("gateway a sees %d live instances after %v, want %d", v.LiveInstances, within, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	liveSeen(2, 10*time.Second)

	b.terminate()
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
	// The survivor's next report (one sync interval, 100 ms) counts one instance. The bound
	// asserted is half the heartbeat's lifetime, which only the leaving report can meet, with
	// room for a loaded machine; the time taken is logged.
	took := liveSeen(1, store.InstanceTTL/2)
	t.Logf("gateway a sees 1 live instance %v after gateway b exited", took.Round(time.Millisecond))
}
