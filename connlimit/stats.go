package connlimit

import "sort"

// Stats are one scope's figures for the admin API and metrics.
type Stats struct {
	App      string // "" = the cluster
	Current  int64  // in flight on this instance
	Peak     int64  // highest Current seen on this instance
	Rejected int64  // acquisitions refused by this scope's own limit
	Leaked   int64  // tickets force-released by the leak sweep
	Limit    int64  // the limit (for an app: the last one Acquire applied)
	Remote   int64  // in flight on (with slots: held by) the other live instances
	Held     int64  // slots this instance holds (with slots)
}

func (c *counts) stats(app string) Stats {
	return Stats{
		App:      app,
		Current:  c.current.Load(),
		Peak:     c.peak.Load(),
		Rejected: c.rejected.Load(),
		Leaked:   c.leaked.Load(),
		Limit:    c.limit.Load(),
		Remote:   c.remote.Load(),
		Held:     c.held.Load(),
	}
}

// Snapshot returns the cluster's figures first, then each app's, sorted by app id.
func (c *Counter) Snapshot() []Stats {
	apps := *c.apps.Load()
	out := make([]Stats, 0, len(apps)+1)
	out = append(out, c.cluster.stats(""))
	for name, a := range apps {
		out = append(out, a.stats(name))
	}
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].App < out[1+j].App })
	return out
}

// ClusterStats returns the cluster's own figures (App ""), without a snapshot of every app.
func (c *Counter) ClusterStats() Stats { return c.cluster.stats("") }

// AppStats returns one app's figures, without a snapshot of every app; false for an app the
// counter does not hold.
func (c *Counter) AppStats(app string) (Stats, bool) {
	a := (*c.apps.Load())[app]
	if a == nil {
		return Stats{}, false
	}
	return a.stats(app), true
}

// InFlight returns this instance's current counts, for the limiter's periodic report. Every
// app seen so far is listed, zeros included, so that the fleet's record of a count that fell
// to zero is overwritten rather than left stale. With slots (UseSlots) the fleet learns nothing
// from reports: nil and 0.
func (c *Counter) InFlight() (apps map[string]int64, cluster int64) {
	if c.slots.Load() != nil {
		return nil, 0
	}
	m := *c.apps.Load()
	apps = make(map[string]int64, len(m))
	for name, a := range m {
		apps[name] = a.current.Load()
	}
	return apps, c.cluster.current.Load()
}

// SetRemote records the other live instances' counts from the fleet's last reports. An app
// missing from apps has remote 0; an app only the fleet knows gets its counters now, so its
// first local request already sees the fleet's count.
func (c *Counter) SetRemote(apps map[string]int64, cluster int64) {
	if c.slots.Load() != nil {
		return // remote is what the other instances hold (the last slot lease)
	}
	for name, n := range apps {
		if n > 0 {
			c.app(name) // create it; bounded like Acquire (MaxApps)
		}
	}
	for name, a := range *c.apps.Load() {
		a.remote.Store(max(apps[name], 0))
	}
	c.cluster.remote.Store(max(cluster, 0))
}
