package admin

import (
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// AdaptiveView is a learned capacity as operators see it (GET /rate_limit/ and GET
// /rate_limit/clusters/<id>): its bounds, what it is now, the fleet's signals of the last
// control period, and its last changes (newest first). Null for a static capacity.
type AdaptiveView struct {
	Learned       float64          `json:"learned"` // the learned capacity (an override pins the one in force)
	Paused        bool             `json:"paused"`  // an override of the capacity pins it: learning waits for its DELETE
	Min           float64          `json:"min"`
	Max           float64          `json:"max"`
	LatencyTarget string           `json:"latency_target"`
	Signals       SignalsView      `json:"signals"`
	Changes       []CapacityChange `json:"changes"`
}

// SignalsView is the fleet's view of the backend in the last control period.
type SignalsView struct {
	Answers   int64   `json:"answers"`   // backend answers to admitted requests
	Throttles int64   `json:"throttles"` // of which throttle statuses (throttle_status)
	Slow      int64   `json:"slow"`      // of which slower than latency_target
	P90       string  `json:"p90"`       // time to response headers (bucket bound of a log-scale sketch)
	Demand    float64 `json:"demand"`    // admitted cost per second when the period ended
}

// CapacityChange is one move of the learned capacity.
type CapacityChange struct {
	At    time.Time `json:"at"`
	From  float64   `json:"from"`
	To    float64   `json:"to"`
	Cause string    `json:"cause"` // throttles, latency (p90 over the target) or demand
}

// adaptiveView is the cluster's learned capacity, or nil when its capacity is static.
func adaptiveView(c Cluster) *AdaptiveView {
	lim := c.Limiter()
	pol := lim.Config().Cluster
	paused := false
	if !pol.Adaptive.On() {
		// a capacity override pins the capacity: the configured policy shows whether it learns
		pol = lim.ConfiguredCluster()
		paused = pol.Adaptive.On()
	}
	if !pol.Adaptive.On() {
		return nil
	}
	st := lim.State()
	v := &AdaptiveView{
		Learned: num(st.Capacity), Paused: paused, Min: pol.Adaptive.Min, Max: pol.Adaptive.Max,
		LatencyTarget: pol.Adaptive.LatencyTarget.String(),
		Signals: SignalsView{
			Answers: st.Adaptive.Period.Answers, Throttles: st.Adaptive.Period.Throttles, Slow: st.Adaptive.Period.Slow,
			P90: st.Adaptive.Period.Latency.P90().String(), Demand: num(st.Adaptive.PeriodCost),
		},
		Changes: []CapacityChange{},
	}
	if st.CapacitySource != store.CapacityAdaptive {
		v.Learned = 0 // not answered yet, or paused: the Store keeps the figure in force
	}
	for _, ch := range lim.CapacityChanges() {
		v.Changes = append(v.Changes, CapacityChange{At: ch.At.UTC(), From: num(ch.From), To: num(ch.To), Cause: ch.Cause})
	}
	return v
}
