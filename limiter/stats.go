package limiter

import (
	"sort"
	"sync/atomic"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// appStats are one metric label's counters, read at scrape time.
type appStats struct {
	cost, localHits     atomic.Int64 // with requests[ReasonNone]: written by every admitted request, one line
	requests            [store.NumReasons]atomic.Int64
	leases, leaseTokens atomic.Int64
}

// AppStats is a snapshot of one metric label's counters.
type AppStats struct {
	Label       string                  // the metric label: a configured id or "*"
	Requests    [store.NumReasons]int64 // final decisions by reason (ReasonNone = admitted), from Record
	Cost        int64                   // admitted cost, from Record
	LocalHits   int64                   // admitted from local tokens without waiting on the Store
	Leases      int64                   // leases that granted tokens
	LeaseTokens int64                   // tokens those leases granted
	LocalTokens int64                   // tokens held locally now
	LocalDebt   int64                   // local debt now (tokens owed, paid first by the next lease)
	Borrowed    float64                 // L2's borrowed tokens at this instance's last lease (App.Borrowing)
	Debt        float64                 // L2's debt at this instance's last lease (App.Borrowing)
}

// Record counts one final decision for metrics: r is ReasonNone for an admitted request, whose
// cost is added to the admitted cost.
func (a *App) Record(r store.Reason, cost int64) {
	if r >= store.NumReasons {
		return
	}
	a.stats.record(r, cost)
	if a.own != nil {
		a.own.record(r, cost)
	}
}

func (s *appStats) record(r store.Reason, cost int64) {
	s.requests[r].Add(1)
	if r == store.ReasonNone {
		s.cost.Add(cost)
	}
}

// Stats returns the counters of every configured app, then of "*" (all unknown apps together)
// unless unknown apps are rejected.
func (l *Limiter) Stats() []AppStats {
	s := l.snap()
	out := make([]AppStats, 0, len(s.apps)+1)
	for id, a := range s.apps {
		out = append(out, appSnapshot(a, a.stats, id))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Label < out[j].Label })
	if st, ok := l.starStats(s); ok {
		out = append(out, st)
	}
	return out
}

// starStats is the counters of "*" (every unknown app: the shared bucket and the isolated
// ones); false with UnknownReject.
func (l *Limiter) starStats(s *snapshot) (AppStats, bool) {
	if s.shared == nil {
		return AppStats{}, false
	}
	b := s.shared.balance.Load()
	held, debt := max(b, 0), max(-b, 0)
	borrowed, l2Debt := s.shared.Borrowing()
	l.cat.isolated.addTotals(&held, &debt, &borrowed, &l2Debt)
	st := l.cat.unknown.snapshot("*", held, debt)
	st.Borrowed, st.Debt = borrowed, l2Debt
	return st, true
}

// appSnapshot is a's counters under label with its local tokens and L2 borrowing.
func appSnapshot(a *App, st *appStats, label string) AppStats {
	b := a.balance.Load()
	out := st.snapshot(label, max(b, 0), max(-b, 0))
	out.Borrowed, out.Debt = a.Borrowing()
	return out
}

func (s *appStats) snapshot(label string, held, debt int64) AppStats {
	st := AppStats{
		Label:       label,
		Cost:        s.cost.Load(),
		LocalHits:   s.localHits.Load(),
		Leases:      s.leases.Load(),
		LeaseTokens: s.leaseTokens.Load(),
		LocalTokens: held,
		LocalDebt:   debt,
	}
	for i := range st.Requests {
		st.Requests[i] = s.requests[i].Load()
	}
	return st
}
