package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// throttleBurst is the burst of the tenant under test: with a guaranteed rate of 0.001/s it is
// all the tenant may pass in a test's lifetime.
const throttleBurst = 20

// sendThrottled sends n GETs of app to g and returns the statuses it got, with the bodies of the
// gateway's rejections.
func sendThrottled(t *testing.T, g *gateway, app string, n int) (statuses map[int]int, bodies []string) {
	t.Helper()
	statuses = map[int]int{}
	for range n {
		req, _ := http.NewRequest("GET", g.base+"/bucket/object", nil)
		req.Header.Set("X-App-Id", app)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		statuses[resp.StatusCode]++
		if body := drain(resp); strings.Contains(body, "rate_limit_exceeded") || strings.Contains(body, "SlowDown") {
			bodies = append(bodies, body)
		}
	}
	return statuses, bodies
}

// TestBackendThrottleIsNotRefunded: a backend that throttles with 429 through reverse_proxy
// does not make the refused requests free: the tenant is held at its quota (its burst, with a
// negligible guaranteed rate), and the gateway rejects the rest itself.
func TestBackendThrottleIsNotRefunded(t *testing.T) {
	requireCaddy(t)
	var arrived atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer backend.Close()
	g := startGateway(t, "backend-429", fmt.Sprintf(`	rate_limit {
		key {http.request.header.X-App-Id}
		app tenant {
			guaranteed 0.001
			burst %d
		}
	}
	reverse_proxy %s`, throttleBurst, strings.TrimPrefix(backend.URL, "http://")))
	statuses, bodies := sendThrottled(t, g, "tenant", 2*throttleBurst)
	if got := arrived.Load(); got != throttleBurst {
		t.Errorf("the backend saw %d requests, want the burst, %d (statuses %v)", got, throttleBurst, statuses)
	}
	if len(bodies) != throttleBurst {
		t.Errorf("the gateway rejected %d requests itself, want %d (statuses %v)", len(bodies), throttleBurst, statuses)
	}
}

// TestLaterLimiterRollsBack: a request that a second rate_limit later in the chain rejects
// gets back what the first took, so the first never runs out: every rejection is the second's
// (format json, 429), none the first's (format s3, 503 SlowDown).
func TestLaterLimiterRollsBack(t *testing.T) {
	requireCaddy(t)
	g := startGateway(t, "later-limiter", fmt.Sprintf(`	route {
		rate_limit {
			cluster first
			key {http.request.header.X-App-Id}
			format s3
			app tenant {
				guaranteed 0.001
				burst %d
			}
		}
		rate_limit {
			cluster second
			key {http.request.header.X-App-Id}
			app tenant {
				guaranteed 0.001
				burst 2
			}
		}
		respond "ok"
	}`, throttleBurst))
	statuses, _ := sendThrottled(t, g, "tenant", 2*throttleBurst)
	if statuses[http.StatusOK] != 2 || statuses[http.StatusTooManyRequests] != 2*throttleBurst-2 {
		t.Errorf("statuses %v, want 2 × 200 and the rest 429 from the second limiter", statuses)
	}
}
