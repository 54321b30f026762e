package limiter

// Per-app reads for the admin API that cost one lookup, not a walk over every app: with tens of
// thousands of configured apps and isolated tenants, a page of the app list or one app's view
// reads only the apps it shows.

// AppStatsOf returns the counters of one configured app, of "*" (every unknown app together),
// or of one active isolated tenant (labelled with its id; isolated reports which: its own
// counters are its decisions and admitted cost, its local hits and leases count under "*"
// only). ok is false for any other id.
func (l *Limiter) AppStatsOf(id string) (st AppStats, isolated, ok bool) {
	s := l.snap()
	if a := s.apps[id]; a != nil {
		return appSnapshot(a, a.stats, id), false, true
	}
	if id == "*" {
		st, ok = l.starStats(s)
		return st, false, ok
	}
	if a := l.cat.isolated.get(id); a != nil && a.own != nil {
		return appSnapshot(a, a.own, id), true, true
	}
	return AppStats{}, false, false
}

// IsolatedStats returns the counters of every active isolated tenant (unknown_app isolated),
// each labelled with its id, in no particular order. A tenant idle for IsolatedTTL is no
// longer active (its counters stay in "*").
func (l *Limiter) IsolatedStats() []AppStats {
	s := &l.cat.isolated
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]AppStats, 0, len(s.m))
	for id, a := range s.m {
		if a.own != nil {
			out = append(out, appSnapshot(a, a.own, id))
		}
	}
	return out
}

// StatsTotals is the sum of the counters Stats returns (every configured app and "*"), without
// building or sorting the list.
func (l *Limiter) StatsTotals() AppStats {
	s := l.snap()
	var t AppStats
	add := func(st AppStats) {
		for i, n := range st.Requests {
			t.Requests[i] += n
		}
		t.Cost += st.Cost
		t.LocalHits += st.LocalHits
		t.Leases += st.Leases
		t.LeaseTokens += st.LeaseTokens
		t.LocalTokens += st.LocalTokens
		t.LocalDebt += st.LocalDebt
		t.Borrowed += st.Borrowed
		t.Debt += st.Debt
	}
	for id, a := range s.apps {
		add(appSnapshot(a, a.stats, id))
	}
	if st, ok := l.starStats(s); ok {
		add(st)
	}
	return t
}
