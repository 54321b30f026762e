package history

import (
	"math"
	"sort"
)

// LiveWindow is the number of seconds over which Live sums an app's figures: the console's one
// "live" window (its cards, top apps and app list agree).
const LiveWindow = 10

// Live is an app's decisions and admitted cost over the last LiveWindow seconds on this
// instance.
type Live struct {
	Allowed  int64 `json:"allowed"`
	Rejected int64 `json:"rejected"`
	Cost     int64 `json:"cost"`
}

// decisions is the number of decisions in l: how busy the app is.
func (l Live) decisions() int64 { return l.Allowed + l.Rejected }

// recent is one app's last LiveWindow seconds, a slot per second (t mod LiveWindow). Only apps
// with a decision in the window have one, so its memory follows the active apps, not the
// configured ones.
type recent [LiveWindow]struct {
	t int64
	Live
}

func (r *recent) add(t int64, d Live) {
	s := &r[t%LiveWindow]
	if s.t != t {
		s.t, s.Live = t, Live{}
	}
	s.Allowed += d.Allowed
	s.Rejected += d.Rejected
	s.Cost += d.Cost
}

// sum is the figures of the seconds after now - LiveWindow, up to now.
func (r *recent) sum(now int64) Live {
	var l Live
	for _, s := range r {
		if s.t > now-LiveWindow && s.t <= now {
			l.Allowed += s.Allowed
			l.Rejected += s.Rejected
			l.Cost += s.Cost
		}
	}
	return l
}

// stale reports whether every slot is older than the window ending at now.
func (r *recent) stale(now int64) bool {
	for _, s := range r {
		if s.t > now-LiveWindow {
			return false
		}
	}
	return true
}

// liveOf is a delta's figures.
func liveOf(d Totals) Live {
	allowed, rejected, _ := counts(d)
	return Live{Allowed: allowed, Rejected: rejected, Cost: d.Cost}
}

// Live returns an app's figures over the last LiveWindow seconds up to the newest sample (zero
// for an app without a decision in that window).
func (r *Recorder) Live(id string) Live {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rc := r.recent[id]; rc != nil {
		return rc.sum(r.newest)
	}
	return Live{}
}

// LiveAll returns the figures of every app with a decision in the last LiveWindow seconds.
func (r *Recorder) LiveAll() map[string]Live {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Live, len(r.recent))
	for id, rc := range r.recent {
		if l := rc.sum(r.newest); l != (Live{}) {
			out[id] = l
		}
	}
	return out
}

// WantedFor is how long an app asked for by name (Window with apps) keeps a series whatever its
// traffic: its page is open. MaxWanted bounds such apps.
const (
	WantedFor = 120 // seconds
	MaxWanted = 16
)

// candidate is an app of a reading without a series: its second's point.
type candidate struct {
	id string
	p  appPoint
}

// busy is how much an app deserves a series: asked for by name (highest), then its decisions
// in the live window.
func (r *Recorder) busy(id string, now int64) int64 {
	if t, ok := r.wanted[id]; ok && now-t < WantedFor {
		return math.MaxInt64
	}
	if rc := r.recent[id]; rc != nil {
		return rc.sum(now).decisions()
	}
	return 0
}

// assign gives series to candidates: a free place to any app, then, with every place taken, a
// busier app takes the place of the least busy one, if busier by a quarter (so that two apps of
// about the same traffic do not trade places every second). A new series starts with the
// app's point of this second.
func (r *Recorder) assign(now int64, cands []candidate) {
	if len(cands) == 0 {
		return
	}
	type ranked struct {
		id string
		n  int64
		i  int // index in cands (candidates)
	}
	var in []ranked
	for i, c := range cands {
		if len(r.apps) < MaxApps {
			r.start(c)
			continue
		}
		if n := r.busy(c.id, now); n > 0 {
			in = append(in, ranked{c.id, n, i})
		}
	}
	if len(in) == 0 {
		return
	}
	sort.Slice(in, func(i, j int) bool { return in[i].n > in[j].n || in[i].n == in[j].n && in[i].id < in[j].id })
	held := make([]ranked, 0, len(r.order))
	for _, id := range r.order {
		held = append(held, ranked{id: id, n: r.busy(id, now)})
	}
	sort.Slice(held, func(i, j int) bool { return held[i].n < held[j].n || held[i].n == held[j].n && held[i].id > held[j].id })
	for k, c := range in {
		if k >= len(held) || c.n <= held[k].n || c.n-held[k].n <= held[k].n/4 {
			break
		}
		r.evict(held[k].id)
		r.start(cands[c.i])
	}
}

// start gives c a series (reusing a freed ring) with its point.
func (r *Recorder) start(c candidate) {
	s := r.spare
	r.spare = nil
	if s == nil {
		s = &series{ring: newRing[appPoint]()}
	}
	s.ring.push(c.p)
	r.apps[c.id] = s
	r.order = append(r.order, c.id)
}

// evict drops id's series, keeping its ring for the next start.
func (r *Recorder) evict(id string) {
	s := r.apps[id]
	delete(r.apps, id)
	for i, o := range r.order {
		if o == id {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
	s.ring.buf, s.ring.start = s.ring.buf[:0], 0
	r.spare = s
}

// want marks apps asked for by name at now (at most MaxWanted at a time; the oldest asks expire
// after WantedFor).
func (r *Recorder) want(apps []string, now int64) {
	for id, t := range r.wanted {
		if now-t >= WantedFor {
			delete(r.wanted, id)
		}
	}
	for _, id := range apps {
		if _, ok := r.wanted[id]; ok || len(r.wanted) < MaxWanted {
			r.wanted[id] = now
		}
	}
}
