package limiter

import (
	"sync/atomic"
	"time"

	"github.com/tierbucket/caddy-tierbucket/adaptive"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// appSignals are the backend's answers to one app's admitted requests on this instance
// (store.Signals), counted on the request path and taken by the sync loop into each cluster
// report. Allocated on an app's first answer under an adaptive capacity, so that apps of a
// static cluster carry nothing.
type appSignals struct {
	answers, throttles, slow atomic.Int64
	latency                  [adaptive.SketchBuckets]atomic.Int64

	sent store.Signals // what earlier reports took (the sync loop's, under syncer.mu)
}

// Observe records the backend's answer to one of the app's admitted requests: its time to
// response headers and whether it was a throttle (a throttle_status from the backend). It
// counts only while the cluster's capacity is learned; a few atomic adds, no allocation after
// the app's first answer.
func (a *App) Observe(latency time.Duration, throttled bool) {
	target := a.l.snap().cfg.Cluster.Adaptive.LatencyTarget
	if target <= 0 {
		return
	}
	s := a.sig.Load()
	if s == nil {
		a.sig.CompareAndSwap(nil, new(appSignals))
		s = a.sig.Load()
	}
	s.answers.Add(1)
	if throttled {
		s.throttles.Add(1)
	}
	if latency > target {
		s.slow.Add(1)
	}
	s.latency[adaptive.Bucket(latency)].Add(1)
}

// takeSignals adds the app's signals since the last take to into (skip: drops them instead).
// The sync loop's (syncer.mu held).
func (a *App) takeSignals(into *store.Signals, skip bool) {
	s := a.sig.Load()
	if s == nil {
		return
	}
	var cur store.Signals
	cur.Answers, cur.Throttles, cur.Slow = s.answers.Load(), s.throttles.Load(), s.slow.Load()
	for i := range s.latency {
		cur.Latency[i] = s.latency[i].Load()
	}
	if !skip {
		into.Answers += cur.Answers - s.sent.Answers
		into.Throttles += cur.Throttles - s.sent.Throttles
		into.Slow += cur.Slow - s.sent.Slow
		for i := range cur.Latency {
			into.Latency[i] += cur.Latency[i] - s.sent.Latency[i]
		}
	}
	s.sent = cur
}

// Signals returns the app's signals on this instance since it started counting (cumulative;
// zero for a static capacity).
func (a *App) Signals() store.Signals {
	var out store.Signals
	if s := a.sig.Load(); s != nil {
		out.Answers, out.Throttles, out.Slow = s.answers.Load(), s.throttles.Load(), s.slow.Load()
		for i := range s.latency {
			out.Latency[i] = s.latency[i].Load()
		}
	}
	return out
}
