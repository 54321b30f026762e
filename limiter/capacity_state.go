package limiter

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/adaptive"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// capacityChanges is the number of the learned capacity's last changes an instance keeps for
// operators (the admin API).
const capacityChanges = 16

// capacityLog follows the learned capacity from report to report: the last changes seen, and
// the decrease episode in progress (logged once when it starts and once when the capacity
// grows again).
type capacityLog struct {
	mu      sync.Mutex
	changes []store.CapacityChange // oldest first, at most capacityChanges

	// Sync loop only (syncer.mu): the episode in progress.
	inEpisode bool
	before    float64   // the capacity when it began
	lowest    float64   // the lowest it went
	decreases int       // how many decreases it took
	began     time.Time // when it began
}

// Capacity is L1's capacity in force and where it comes from: an operator's override
// (store.CapacityOverride, which pauses learning), the learned one (store.CapacityAdaptive) or
// the configured one (store.CapacityConfig); 0 and "" without L1. Before the Store answered,
// it is the configured figure.
func (l *Limiter) Capacity() (float64, string) {
	cfg := l.snap().cfg.Cluster
	if o, ok := l.ClusterOverride(); ok && o.Capacity != nil {
		return *o.Capacity, store.CapacityOverride
	}
	st := l.state.Load()
	switch {
	case cfg.Capacity <= 0:
		return 0, ""
	case st.CapacitySource == "" || st.Capacity <= 0:
		return cfg.Capacity, store.CapacityConfig
	}
	return st.Capacity, st.CapacitySource
}

// CapacityChanges returns the last changes of the learned capacity this instance saw, newest
// first.
func (l *Limiter) CapacityChanges() []store.CapacityChange {
	l.capLog.mu.Lock()
	defer l.capLog.mu.Unlock()
	out := make([]store.CapacityChange, len(l.capLog.changes))
	for i, c := range l.capLog.changes {
		out[len(out)-1-i] = c
	}
	return out
}

// followCapacity records a change of the learned capacity that L1's answer cur brings (one
// per control period at most) and logs a decrease episode (throttles or latency) once at its
// start, with its cause and signals, and once when the capacity grows again; trims on a queue
// within an episode count as its decreases, and outside one are not logged. Sync loop only.
func (l *Limiter) followCapacity(prev, cur *store.ClusterState) {
	c := cur.Adaptive.LastChange
	if cur.CapacitySource != store.CapacityAdaptive || c.At.IsZero() || c.At.Equal(prev.Adaptive.LastChange.At) {
		return
	}
	k := &l.capLog
	k.mu.Lock()
	if n := len(k.changes); n == 0 || !k.changes[n-1].At.Equal(c.At) {
		k.changes = append(k.changes, c)
		if len(k.changes) > capacityChanges {
			k.changes = k.changes[1:]
		}
	}
	k.mu.Unlock()
	log := l.logger()
	p := cur.Adaptive.Period
	fields := []zap.Field{
		zap.String("cluster", l.snap().cfg.Cluster.ID), zap.String("cause", c.Cause),
		zap.Float64("from", c.From), zap.Float64("to", c.To),
		zap.Int64("answers", p.Answers), zap.Int64("throttles", p.Throttles), zap.Int64("slow", p.Slow),
		zap.Duration("p90", p.Latency.P90()), zap.Float64("demand", cur.Adaptive.PeriodCost),
	}
	switch {
	case c.To < c.From && c.Cause == adaptive.Queue.String() && !k.inEpisode:
		// a trim on a queue is the law keeping the fleet under the backend's line, as routine
		// as an increase: not an overload episode of its own
	case c.To < c.From && !k.inEpisode:
		k.inEpisode, k.before, k.lowest, k.decreases, k.began = true, c.From, c.To, 1, c.At
		if log != nil {
			log.Info("rate_limit: the backend is overloaded: lowering the learned capacity", fields...)
		}
	case c.To < c.From:
		k.lowest = min(k.lowest, c.To)
		k.decreases++
	case k.inEpisode:
		k.inEpisode = false
		if log != nil {
			log.Info("rate_limit: the backend is healthy again: raising the learned capacity", append(fields,
				zap.Float64("before", k.before), zap.Float64("lowest", k.lowest), zap.Int("decreases", k.decreases),
				zap.Duration("lasted", c.At.Sub(k.began)))...)
		}
	}
}

// ConfiguredCluster is the cluster's L1 policy as loaded (Caddyfile or JSON), without the
// admin API's override.
func (l *Limiter) ConfiguredCluster() store.ClusterPolicy {
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	return l.ovr.base.Cluster
}
