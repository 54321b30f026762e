package e2e

import (
	"encoding/json"
	"testing"
	"time"
)

// TestAdaptiveCapacityOperators: an operator sees the learned capacity (GET /rate_limit/, the
// capacity metric with source adaptive), pins it with a PUT of the cluster's capacity (source
// override, learning paused) and lets it learn again with the DELETE, from the pinned figure.
func TestAdaptiveCapacityOperators(t *testing.T) {
	requireCaddy(t)
	g := startGateway(t, "adaptive-ops", `	rate_limit {
		cluster ops
		key {http.request.header.X-App-Id}
		capacity 1000 {
			adaptive {
				min 200
				max 3000
				latency_target 50ms
			}
		}
		app a {
			guaranteed 100
			max 400
		}
	}
	respond "ok"`)
	capacity := func(source string) float64 {
		return g.waitMetric(10*time.Second, func(v float64) bool { return v > 0 },
			"caddy_rate_limit_capacity_tokens", `cluster="ops"`, `source="`+source+`"`)
	}
	if c := capacity("adaptive"); c != 1000 {
		t.Fatalf("learned capacity %v before any signal, want the starting 1000", c)
	}
	var view struct {
		Capacity       float64 `json:"capacity"`
		CapacitySource string  `json:"capacity_source"`
		Adaptive       *struct {
			Min, Max, Learned float64
			Paused            bool
			LatencyTarget     string `json:"latency_target"`
		} `json:"adaptive"`
	}
	if err := json.Unmarshal([]byte(adminBody(t, g, "/rate_limit/")), &view); err != nil {
		t.Fatal(err)
	}
	if view.CapacitySource != "adaptive" || view.Adaptive == nil || view.Adaptive.Min != 200 || view.Adaptive.Max != 3000 ||
		view.Adaptive.LatencyTarget != "50ms" || view.Adaptive.Paused {
		t.Fatalf("GET /rate_limit/: %+v adaptive %+v", view, view.Adaptive)
	}

	if status, body := g.adminDo("PUT", "/rate_limit/clusters/ops", "application/json", `{"capacity": 700}`); status != 200 {
		t.Fatalf("PUT capacity: %d %s", status, body)
	}
	if c := capacity("override"); c != 700 {
		t.Fatalf("pinned capacity %v, want 700", c)
	}
	// the fleet's L1 (the Store) holds the pinned figure once a report carried it: learning is
	// paused, the learned figure no longer shown
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := json.Unmarshal([]byte(adminBody(t, g, "/rate_limit/clusters/ops")), &view); err != nil {
			t.Fatal(err)
		}
		if view.Adaptive != nil && view.Adaptive.Paused && view.Adaptive.Learned == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /rate_limit/clusters/ops while pinned: adaptive %+v, want paused", view.Adaptive)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if status, body := g.adminDo("DELETE", "/rate_limit/clusters/ops", "", ""); status != 200 {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	if c := capacity("adaptive"); c != 700 {
		t.Fatalf("learning resumed at %v, want the pinned 700", c)
	}
}
