// Package history keeps a short, fixed-size history of one cluster as this instance sees it:
// one Sample per second for the last Window seconds, one AppSample series per app for at most
// MaxApps apps (the busiest, and those whose page is open), and every active app's figures over
// the last LiveWindow seconds. It is fed by the root package's sampler (once a second) and read by the
// admin API (GET /rate_limit/history and /rate_limit/stream, docs/admin-api.md).
//
// Memory is bounded whatever the traffic: the cluster ring holds Window samples, and each of at
// most MaxApps app series is a ring of Window samples allocated when the app first appears
// (about 150 KB per app series: about 10 MB per cluster with every series in use). Once every
// place is taken, an app busier than the least busy holder takes its place (live.go); the
// others have no series. A series whose app has had no sample for Window seconds (an app a
// reload removed) is dropped, which frees its place. The live figures take a few hundred bytes
// per app with a decision in the last LiveWindow seconds, none for idle apps.
//
// The Recorder takes its time from the caller (Record(now, …)), so it never reads a clock.
package history

import (
	"sort"
	"sync"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

const (
	// Window is the number of samples kept, one per second: 15 minutes.
	Window = 900
	// MaxApps is the number of apps with a series.
	MaxApps = 64
	// TopApps is how many apps a query without explicit apps returns (the busiest).
	TopApps = 10
)

// Totals are cumulative counters, as a cluster's or an app's statistics give them.
type Totals struct {
	Requests  [store.NumReasons]int64 // final decisions by reason; store.ReasonNone = admitted
	Cost      int64                   // admitted cost
	LocalHits int64                   // admitted from local tokens

	Leases, LeaseTokens int64 // leases that granted tokens, and the tokens granted
}

// Reading is one cluster's figures at one instant: cumulative Totals and current levels.
type Reading struct {
	Totals
	Usage           float64 // L1 usage
	Capacity        float64 // L1 capacity (0: none)
	Level           int     // degradation level 0..3
	Emergency       bool
	LiveInstances   int
	InFlight        int64 // requests in flight on this instance
	ConnectionLimit int64 // the cluster's in-flight limit
	Apps            []AppReading
}

// AppReading is one app's figures at one instant.
type AppReading struct {
	ID string
	Totals
	LocalTokens int64
	InFlight    int64
	Limit       int64 // the app's in-flight limit
	Borrowed    float64
	Debt        float64
	Guaranteed  float64
	Burst       float64
}

// Sample is one second of the cluster on this instance. Allowed, Rejected, Reasons and Cost
// are counts during that second; the other fields are levels at its end.
type Sample struct {
	T               int64            `json:"t"` // unix seconds
	Allowed         int64            `json:"allowed"`
	Rejected        int64            `json:"rejected"`
	Reasons         map[string]int64 `json:"reasons"` // rejections by reason (none: left out)
	Cost            int64            `json:"cost"`
	Usage           float64          `json:"usage"`
	Capacity        float64          `json:"capacity"`
	Level           int              `json:"level"`
	Emergency       bool             `json:"emergency"`
	LiveInstances   int              `json:"live_instances"`
	InFlight        int64            `json:"in_flight"`
	ConnectionLimit int64            `json:"connection_limit"`
	LocalHitRatio   float64          `json:"local_hit_ratio"` // admitted from local tokens / admitted, that second
}

// AppSample is one second of one app on this instance (counts during the second, levels at its end).
type AppSample struct {
	T           int64            `json:"t"`
	Allowed     int64            `json:"allowed"`
	Rejected    int64            `json:"rejected"`
	Reasons     map[string]int64 `json:"reasons"`
	Cost        int64            `json:"cost"`
	LocalTokens int64            `json:"local_tokens"`
	InFlight    int64            `json:"in_flight"`
	Limit       int64            `json:"limit"`
	Borrowed    float64          `json:"borrowed"`
	Debt        float64          `json:"debt"`
	Guaranteed  float64          `json:"guaranteed"`
	Burst       float64          `json:"burst"`
}

// point is a stored cluster sample: the second's deltas and the levels.
type point struct {
	t     int64
	delta Totals
	r     Reading // levels only (Totals and Apps unused)
}

// appPoint is a stored app sample.
type appPoint struct {
	t     int64
	delta Totals
	r     AppReading // levels only
}

// series is one app's ring.
type series struct {
	ring ring[appPoint]
}

// Recorder is the history of one cluster. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	ring  ring[point]
	prev  Totals
	apps  map[string]*series
	order []string // the apps with a series
	spare *series  // a ring freed by an eviction, for the next series

	newest int64              // the newest sample's t
	recent map[string]*recent // the apps with a decision in the last LiveWindow seconds (live.go)
	wanted map[string]int64   // apps asked for by name, and when (live.go)

	// The last reading's app Totals, series or not (so that an app getting a series late
	// counts from its last reading): the apps of one reading, bounded by the config.
	prevApps map[string]Totals

	changed chan struct{} // closed (and replaced) by the next Record
}

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{
		ring: newRing[point](), apps: map[string]*series{}, changed: make(chan struct{}),
		recent: map[string]*recent{}, wanted: map[string]int64{},
	}
}

// Changed returns a channel that is closed by the next Record. Taken before Latest, it tells a
// reader when there may be a newer sample, without polling.
func (r *Recorder) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Record adds the reading taken at now: the counts since the previous reading (the first one
// counts from zero, as the counters of a new cluster do; a counter that went down was reset
// and counts from zero again). A reading in the same second as the last sample, or an
// earlier one, is added to that sample (one sample per second). An app counts from its
// previous reading, or from zero if the previous reading did not have it.
func (r *Recorder) Record(now time.Time, rd Reading) {
	t := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	d := delta(rd.Totals, r.prev)
	r.prev = rd.Totals
	levels := rd
	levels.Totals, levels.Apps = Totals{}, nil
	if last := r.ring.last(); last != nil && t <= last.t {
		last.delta = add(last.delta, d)
		last.r = levels
		t = last.t
	} else {
		r.ring.push(point{t: t, delta: d, r: levels})
	}
	r.newest = t
	r.dropStale(t)
	prevApps := make(map[string]Totals, len(rd.Apps))
	var cands []candidate
	for _, a := range rd.Apps {
		d := delta(a.Totals, r.prevApps[a.ID])
		prevApps[a.ID] = a.Totals
		if l := liveOf(d); l != (Live{}) {
			rc := r.recent[a.ID]
			if rc == nil {
				rc = new(recent)
				r.recent[a.ID] = rc
			}
			rc.add(t, l)
		}
		lv := a
		lv.Totals, lv.ID = Totals{}, ""
		s := r.apps[a.ID]
		if s == nil {
			cands = append(cands, candidate{id: a.ID, p: appPoint{t: t, delta: d, r: lv}})
			continue
		}
		if last := s.ring.last(); last != nil && t <= last.t {
			last.delta = add(last.delta, d)
			last.r = lv
		} else {
			s.ring.push(appPoint{t: t, delta: d, r: lv})
		}
	}
	r.assign(t, cands)
	r.prevApps = prevApps
	close(r.changed)
	r.changed = make(chan struct{})
}

// dropStale drops the series whose newest sample is Window seconds older than t, and the live
// figures of apps without a decision in the last LiveWindow seconds.
func (r *Recorder) dropStale(t int64) {
	for id, rc := range r.recent {
		if rc.stale(t) {
			delete(r.recent, id)
		}
	}
	kept := r.order[:0]
	for _, id := range r.order {
		if last := r.apps[id].ring.last(); last != nil && t-last.t >= Window {
			delete(r.apps, id)
			continue
		}
		kept = append(kept, id)
	}
	r.order = kept
}

// delta is cur - prev per counter; a counter below its previous value was reset: cur.
func delta(cur, prev Totals) Totals {
	d := Totals{
		Cost: sub(cur.Cost, prev.Cost), LocalHits: sub(cur.LocalHits, prev.LocalHits),
		Leases: sub(cur.Leases, prev.Leases), LeaseTokens: sub(cur.LeaseTokens, prev.LeaseTokens),
	}
	for i := range cur.Requests {
		d.Requests[i] = sub(cur.Requests[i], prev.Requests[i])
	}
	return d
}

func sub(cur, prev int64) int64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

func add(a, b Totals) Totals {
	a.Cost += b.Cost
	a.LocalHits += b.LocalHits
	a.Leases += b.Leases
	a.LeaseTokens += b.LeaseTokens
	for i := range a.Requests {
		a.Requests[i] += b.Requests[i]
	}
	return a
}

// History is a window of the recorder: the cluster's samples and some apps' series, oldest first.
type History struct {
	Samples []Sample
	Apps    map[string][]AppSample
}

// Window returns the samples of the last `seconds` seconds (those with t > newest t - seconds)
// and the series of the given apps in that window (apps without a series are left out), or,
// with apps nil, of the TopApps apps with the most decisions (admitted + rejected) in the
// window (ties by id).
func (r *Recorder) Window(seconds int, apps []string) History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{Samples: []Sample{}, Apps: map[string][]AppSample{}}
	last := r.ring.last()
	if last == nil {
		return h
	}
	from := last.t - int64(seconds) // exclusive
	for i := range r.ring.len() {
		if p := r.ring.at(i); p.t > from {
			h.Samples = append(h.Samples, p.sample())
		}
	}
	if apps == nil {
		apps = r.busiest(from)
	} else {
		r.want(apps, last.t)
	}
	for _, id := range apps {
		s := r.apps[id]
		if s == nil {
			continue
		}
		out := []AppSample{}
		for i := range s.ring.len() {
			if p := s.ring.at(i); p.t > from {
				out = append(out, p.sample())
			}
		}
		h.Apps[id] = out
	}
	return h
}

// busiest is up to TopApps apps with the most decisions after from.
func (r *Recorder) busiest(from int64) []string {
	type busy struct {
		id string
		n  int64
	}
	all := make([]busy, 0, len(r.order))
	for _, id := range r.order {
		s := r.apps[id]
		var n int64
		for i := range s.ring.len() {
			if p := s.ring.at(i); p.t > from {
				for _, c := range p.delta.Requests {
					n += c
				}
			}
		}
		all = append(all, busy{id, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].id < all[j].id
	})
	ids := make([]string, 0, min(len(all), TopApps))
	for _, b := range all[:min(len(all), TopApps)] {
		ids = append(ids, b.id)
	}
	return ids
}

// Totals returns the cluster's cumulative counters as of the last reading; ok is false while
// nothing was recorded.
func (r *Recorder) Totals() (t Totals, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prev, r.ring.last() != nil
}

// Latest returns the newest sample and the samples of every app that has one for the same
// second; ok is false while nothing was recorded.
func (r *Recorder) Latest() (s Sample, apps map[string]AppSample, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.ring.last()
	if last == nil {
		return Sample{}, nil, false
	}
	apps = map[string]AppSample{}
	for _, id := range r.order {
		if p := r.apps[id].ring.last(); p != nil && p.t == last.t {
			apps[id] = p.sample()
		}
	}
	return last.sample(), apps, true
}

// counts are the decision counts of a delta: admitted, rejected, rejections by reason.
func counts(d Totals) (allowed, rejected int64, reasons map[string]int64) {
	reasons = map[string]int64{}
	for i, n := range d.Requests {
		if r := store.Reason(i); r == store.ReasonNone {
			allowed = n
		} else if n != 0 {
			rejected += n
			reasons[r.String()] = n
		}
	}
	return allowed, rejected, reasons
}

func (p *point) sample() Sample {
	allowed, rejected, reasons := counts(p.delta)
	s := Sample{
		T: p.t, Allowed: allowed, Rejected: rejected, Reasons: reasons, Cost: p.delta.Cost,
		Usage: p.r.Usage, Capacity: p.r.Capacity, Level: p.r.Level, Emergency: p.r.Emergency,
		LiveInstances: p.r.LiveInstances, InFlight: p.r.InFlight, ConnectionLimit: p.r.ConnectionLimit,
	}
	if allowed > 0 {
		s.LocalHitRatio = min(float64(p.delta.LocalHits)/float64(allowed), 1)
	}
	return s
}

func (p *appPoint) sample() AppSample {
	allowed, rejected, reasons := counts(p.delta)
	return AppSample{
		T: p.t, Allowed: allowed, Rejected: rejected, Reasons: reasons, Cost: p.delta.Cost,
		LocalTokens: p.r.LocalTokens, InFlight: p.r.InFlight, Limit: p.r.Limit, Borrowed: p.r.Borrowed,
		Debt: p.r.Debt, Guaranteed: p.r.Guaranteed, Burst: p.r.Burst,
	}
}
