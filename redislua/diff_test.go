package redislua

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestDifferential drives the memory store and the Redis store with one random sequence of
// leases, returns, reports (numbered or not, with resent Seqs), policy changes (warm-up included),
// operator emergencies (set, expiring, cleared), admin overrides, audit entries, connection slots and clock steps, and requires identical answers and
// identical stored buckets (bit for bit: both compute in IEEE doubles in the same order).
func TestDifferential(t *testing.T) {
	client := standaloneClient(t)
	ctx := context.Background()
	apps := []string{"a", "b", "c"}
	instances := []string{"i1", "i2", "i3"}

	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewManual()
		mem := memstore.New(clk)
		red := New(client, uniquePrefix(t), WithClock(clk))

		num := rapid.SampledFrom([]float64{0.3, 1, 2.5, 7, 10, 33.3, 100, 1234.5678, 1e5})
		// A burst below guaranteed (x 0.5) is invalid: both stores must refuse it.
		genPolicy := func(label string) store.AppPolicy {
			g := num.Draw(rt, label+"-guaranteed")
			return store.AppPolicy{
				Guaranteed: g, Burst: g * rapid.SampledFrom([]float64{1, 1.5, 3, 10.1, 0.5}).Draw(rt, label+"-burstx"),
				Warmup: rapid.SampledFrom([]time.Duration{
					0, 0, 1500 * time.Nanosecond, 333333 * time.Microsecond, time.Second,
					3 * time.Second, 7 * time.Second, 40 * time.Second, time.Hour,
				}).Draw(rt, label+"-warmup"),
				MaxBorrow: rapid.SampledFrom([]float64{0, 0, 2.5, 7, 50, 1000}).Draw(rt, label+"-maxborrow"),
			}
		}
		cluster := store.ClusterPolicy{
			ID:                 "c",
			Capacity:           rapid.SampledFrom([]float64{0, 50, 1000, 33.3}).Draw(rt, "capacity"),
			ReservedRatio:      0.1,
			EmergencyThreshold: rapid.SampledFrom([]float64{0.95, 0.99}).Draw(rt, "threshold"),
			EmergencyRatios:    [4]float64{1, 0.5, 0.1, 0},
		}
		// An adaptive capacity (or none), redrawn at reloads: bounds around the capacity.
		genAdaptive := func() store.AdaptivePolicy {
			if cluster.Capacity == 0 || rapid.Bool().Draw(rt, "static") {
				return store.AdaptivePolicy{}
			}
			return store.AdaptivePolicy{
				Min:           cluster.Capacity * rapid.SampledFrom([]float64{0.25, 0.7, 1}).Draw(rt, "adaptive-min"),
				Max:           cluster.Capacity * rapid.SampledFrom([]float64{1, 1.3, 2}).Draw(rt, "adaptive-max"),
				LatencyTarget: 100 * time.Millisecond,
			}
		}
		cluster.Adaptive = genAdaptive()
		// The borrow pool's rate (LeaseRequest.Unallocated), redrawn at reloads.
		genUnallocated := func() float64 {
			return rapid.SampledFrom([]float64{0, 3.3, 20, 100, 1234.5678}).Draw(rt, "unallocated")
		}
		unallocated := genUnallocated()
		policies := map[string]store.AppPolicy{}
		for _, a := range apps {
			policies[a] = genPolicy(a)
		}
		seqs := map[string]uint64{} // each instance's highest Seq so far
		var elapsed time.Duration
		const maxElapsed = 55 * time.Second // below the 60 s idle expiry: Redis expires in real time

		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			app := rapid.SampledFrom(apps).Draw(rt, "app")
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); op {
			case 0, 1: // lease
				req := store.LeaseRequest{
					Cluster: cluster, App: app, Policy: policies[app],
					Factor:      rapid.SampledFrom([]float64{1, 0.5, 1.0 / 3, 0.1, 0}).Draw(rt, "factor"),
					Need:        rapid.Int64Range(0, 200).Draw(rt, "need"),
					Instance:    rapid.SampledFrom(instances).Draw(rt, "instance"),
					Unallocated: unallocated,
					NoBorrow:    rapid.IntRange(0, 4).Draw(rt, "noborrow") == 0,
				}
				req.Want = req.Need + rapid.Int64Range(0, 300).Draw(rt, "extra")
				if rapid.Bool().Draw(rt, "stats") { // statistics on the lease, Seqs shared with the reports
					seq := rapid.Uint64Range(1, seqs[req.Instance]+2).Draw(rt, "stats-seq")
					seqs[req.Instance] = max(seqs[req.Instance], seq)
					req.Stats = store.StatsBatch{Seq: seq, Requests: rapid.Int64Range(0, 50).Draw(rt, "stats-requests")}
				}
				lm, em := mem.Lease(ctx, req)
				lr, er := red.Lease(ctx, req)
				if (em == nil) != (er == nil) || lm != lr {
					rt.Fatalf("step %d Lease(%+v):\nmemory %+v %v\nredis  %+v %v", step, req, lm, em, lr, er)
				}
			case 2: // return
				ret := store.Return{
					Cluster: cluster, App: app, Policy: policies[app],
					Tokens: rapid.Int64Range(-5, 300).Draw(rt, "tokens"), Instance: rapid.SampledFrom(instances).Draw(rt, "instance"),
				}
				if rapid.Bool().Draw(rt, "stats") { // statistics on the return, Seqs shared with leases and reports
					seq := rapid.Uint64Range(1, seqs[ret.Instance]+2).Draw(rt, "stats-seq")
					if ret.Tokens > 0 { // a return of no tokens is a no-op: its Seq goes nowhere
						seqs[ret.Instance] = max(seqs[ret.Instance], seq)
					}
					ret.Stats = store.StatsBatch{Seq: seq, Requests: rapid.Int64Range(0, 50).Draw(rt, "stats-requests")}
				}
				em, er := mem.Return(ctx, ret), red.Return(ctx, ret)
				if (em == nil) != (er == nil) {
					rt.Fatalf("step %d Return(%+v): memory %v, redis %v", step, ret, em, er)
				}
			case 3: // report
				inst := rapid.SampledFrom(instances).Draw(rt, "instance")
				rep := store.Report{
					Cluster: cluster, Instance: inst, InFlight: rapid.Int64Range(0, 20).Draw(rt, "inflight"),
					Cost: rapid.Int64Range(0, 300).Draw(rt, "report-cost"),
					// at once, a sync interval or so, or beyond store.MaxCostSpan
					CostSpan: time.Duration(rapid.SampledFrom([]int64{0, 1, 100_000, 137_511, 2_500_000}).Draw(rt, "span-us")) * time.Microsecond,
				}
				if rapid.Bool().Draw(rt, "signals") { // the backend's answers: healthy, throttling or slow
					n := rapid.Int64Range(0, 400).Draw(rt, "answers")
					rep.Signals = store.Signals{
						Answers: n, Throttles: rapid.Int64Range(0, n/20).Draw(rt, "throttles"),
						Slow: rapid.Int64Range(0, n/5).Draw(rt, "slow"),
					}
					rep.Signals.Latency[rapid.IntRange(0, 15).Draw(rt, "bucket")] = n
				}
				// Unnumbered, a resend, the next Seq, or any Seq up to the next.
				switch rapid.IntRange(0, 3).Draw(rt, "seqkind") {
				case 1:
					rep.Seq = seqs[inst]
				case 2:
					seqs[inst]++
					rep.Seq = seqs[inst]
				case 3:
					rep.Seq = rapid.Uint64Range(1, seqs[inst]+1).Draw(rt, "seq")
					seqs[inst] = max(seqs[inst], rep.Seq)
				}
				for _, a := range apps {
					if !rapid.Bool().Draw(rt, "include-"+a) {
						continue
					}
					ar := store.AppReport{
						App: a, Requests: rapid.Int64Range(0, 50).Draw(rt, "requests"),
						Cost: rapid.Int64Range(0, 500).Draw(rt, "cost"), InFlight: rapid.Int64Range(0, 5).Draw(rt, "appinflight"),
					}
					if rapid.Bool().Draw(rt, "app-seq-"+a) { // the app's figures under the report's Seq, or none
						ar.Seq = rep.Seq
					}
					rep.Apps = append(rep.Apps, ar)
				}
				rep.Leaving = rapid.IntRange(0, 5).Draw(rt, "leaving") == 0 // now and then the instance's last
				sm, em := mem.Report(ctx, rep)
				sr, er := red.Report(ctx, rep)
				if (em == nil) != (er == nil) || !sameState(sm, sr) {
					rt.Fatalf("step %d Report(%+v):\nmemory %+v %v\nredis  %+v %v", step, rep, sm, em, sr, er)
				}
			case 4: // clock step
				d := rapid.SampledFrom([]time.Duration{
					0, time.Microsecond, 77 * time.Millisecond, 333333 * time.Microsecond,
					time.Second, 2999 * time.Millisecond, 3 * time.Second, 3001 * time.Millisecond, 10 * time.Second,
				}).Draw(rt, "advance")
				d = min(d, maxElapsed-elapsed)
				elapsed += d
				clk.Advance(d)
			case 5: // reload: a new policy for the app, and the cluster's adaptive policy
				policies[app] = genPolicy(app)
				unallocated = genUnallocated()
				cluster.Adaptive = genAdaptive()
			case 6: // operator emergency: set (until deactivated, ending later, already over) or cleared
				em := store.Emergency{
					Active: rapid.Bool().Draw(rt, "active"),
					Reason: rapid.SampledFrom([]string{"", "maintenance", "ünï \"code\""}).Draw(rt, "reason"),
				}
				if d := rapid.SampledFrom([]time.Duration{
					-1, 0, 1500 * time.Nanosecond, 333333 * time.Microsecond, time.Second,
					5 * time.Second, -time.Second,
				}).Draw(rt, "until"); d != -1 {
					em.Until = clk.Now().Add(d)
				}
				em1, er1 := mem.SetEmergency(ctx, cluster, em), red.SetEmergency(ctx, cluster, em)
				if (em1 == nil) != (er1 == nil) {
					rt.Fatalf("step %d SetEmergency(%+v): memory %v, redis %v", step, em, em1, er1)
				}
			case 8: // connection slots of the app's scope or the cluster's
				r := store.SlotRequest{
					Cluster: cluster.ID, App: rapid.SampledFrom([]string{"", app}).Draw(rt, "scope"),
					Instance: rapid.SampledFrom(instances).Draw(rt, "instance"),
					Want:     rapid.Int64Range(0, 12).Draw(rt, "want"), Limit: rapid.Int64Range(0, 10).Draw(rt, "limit"),
				}
				r.InUse = rapid.Int64Range(0, r.Want).Draw(rt, "in use")
				sm, em := mem.LeaseSlots(ctx, r)
				sr, er := red.LeaseSlots(ctx, r)
				if (em == nil) != (er == nil) || sm != sr {
					rt.Fatalf("step %d LeaseSlots(%+v): memory %+v %v, redis %+v %v", step, r, sm, em, sr, er)
				}
			case 7: // an admin override set or removed, at the current version or a stale one
				ch := store.OverrideChange{Key: rapid.SampledFrom([]string{"cluster", "app:" + app}).Draw(rt, "key")}
				if rapid.Bool().Draw(rt, "set") {
					ch.Value = []byte(rapid.SampledFrom([]string{`{}`, `{"guaranteed":5}`, `"ünï"`}).Draw(rt, "value"))
				}
				cur, err := mem.Overrides(ctx, cluster.ID)
				if err != nil {
					rt.Fatal(err)
				}
				ch.IfVersion = cur.Version
				if rapid.IntRange(0, 3).Draw(rt, "stale") == 0 {
					ch.IfVersion = max(cur.Version, 1) - 1
				}
				v1, e1 := mem.SetOverride(ctx, cluster.ID, ch)
				v2, e2 := red.SetOverride(ctx, cluster.ID, ch)
				if v1 != v2 || (e1 == nil) != (e2 == nil) || errors.Is(e1, store.ErrVersionConflict) != errors.Is(e2, store.ErrVersionConflict) {
					rt.Fatalf("step %d SetOverride(%+v): memory %d %v, redis %d %v", step, ch, v1, e1, v2, e2)
				}
				o1, err1 := mem.Overrides(ctx, cluster.ID)
				o2, err2 := red.Overrides(ctx, cluster.ID)
				if err1 != nil || err2 != nil || o1.Version != o2.Version || !reflect.DeepEqual(o1.Entries, o2.Entries) {
					rt.Fatalf("step %d overrides: memory %+v %v, redis %+v %v", step, o1, err1, o2, err2)
				}
			case 9: // an audit entry (or a refused empty one), then the newest few read back
				entry := []byte(rapid.SampledFrom([]string{`{"change":"a"}`, `"ünï"`, ""}).Draw(rt, "entry"))
				e1, e2 := mem.AppendAudit(ctx, cluster.ID, entry), red.AppendAudit(ctx, cluster.ID, entry)
				if (e1 == nil) != (e2 == nil) {
					rt.Fatalf("step %d AppendAudit(%q): memory %v, redis %v", step, entry, e1, e2)
				}
				limit := rapid.IntRange(-1, 5).Draw(rt, "limit")
				a1, err1 := mem.Audit(ctx, cluster.ID, limit)
				a2, err2 := red.Audit(ctx, cluster.ID, limit)
				if err1 != nil || err2 != nil || len(a1) != len(a2) || (len(a1) > 0 && !reflect.DeepEqual(a1, a2)) {
					rt.Fatalf("step %d Audit(%d): memory %q %v, redis %q %v", step, limit, a1, err1, a2, err2)
				}
			}
			for _, a := range apps {
				compareBucket(rt, step, mem, red, cluster.ID, a)
			}
		}
	})
}

// sameState compares two ClusterStates; an app whose remote in-flight sum is 0 may be absent
// from RemoteInFlight; PrevSeq must match exactly.
func sameState(a, b store.ClusterState) bool {
	ra, rb := a.RemoteInFlight, b.RemoteInFlight
	if a.Usage != b.Usage || a.Factors != b.Factors || a.Emergency != b.Emergency ||
		a.EmergencySource != b.EmergencySource || a.EmergencyReason != b.EmergencyReason || !a.EmergencyUntil.Equal(b.EmergencyUntil) ||
		a.LiveInstances != b.LiveInstances || a.RemoteClusterInFlight != b.RemoteClusterInFlight ||
		a.ConfigVersion != b.ConfigVersion || a.Capacity != b.Capacity || a.CapacitySource != b.CapacitySource ||
		a.Adaptive.Period != b.Adaptive.Period || a.Adaptive.PeriodCost != b.Adaptive.PeriodCost ||
		!a.Adaptive.LastChange.At.Equal(b.Adaptive.LastChange.At) || a.Adaptive.LastChange.From != b.Adaptive.LastChange.From ||
		a.Adaptive.LastChange.To != b.Adaptive.LastChange.To || a.Adaptive.LastChange.Cause != b.Adaptive.LastChange.Cause {
		return false
	}
	for k, v := range ra {
		if rb[k] != v {
			return false
		}
	}
	for k, v := range rb {
		if ra[k] != v {
			return false
		}
	}
	if len(a.PrevSeq) != len(b.PrevSeq) {
		return false
	}
	for k, v := range a.PrevSeq {
		if w, ok := b.PrevSeq[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// compareBucket requires the stored L2 records to be identical.
func compareBucket(rt *rapid.T, step int, mem *memstore.Store, red *Store, cluster, app string) {
	ms, ok := mem.AppState(cluster, app)
	vals, err := red.client.HMGet(context.Background(), red.keys.l2(cluster, app), "tokens", "ts", "consumed", "requests",
		"last_grant", "warm_start", "warm_granted", "debt", "borrowed").Result()
	if err != nil {
		rt.Fatal(err)
	}
	num := func(v any) float64 {
		if v == nil {
			return 0
		}
		f, err := strconv.ParseFloat(v.(string), 64)
		if err != nil {
			rt.Fatal(err)
		}
		return f
	}
	var rs memstore.MemoryAppState
	if vals[0] != nil {
		rs.Tokens, rs.TS = num(vals[0]), time.UnixMicro(int64(num(vals[1])))
	}
	rs.Consumed, rs.Requests = int64(num(vals[2])), int64(num(vals[3]))
	if vals[4] != nil {
		rs.LastGrant = time.UnixMicro(int64(num(vals[4])))
	}
	if vals[5] != nil {
		rs.WarmStart, rs.WarmGranted = time.UnixMicro(int64(num(vals[5]))), int64(num(vals[6]))
	}
	rs.Debt, rs.Borrowed = num(vals[7]), num(vals[8])
	redisHas := vals[0] != nil || vals[3] != nil
	if ok != redisHas || (ok && !(ms.Tokens == rs.Tokens && ms.TS.Equal(rs.TS) && ms.Consumed == rs.Consumed && ms.Requests == rs.Requests &&
		ms.LastGrant.Equal(rs.LastGrant) && ms.WarmStart.Equal(rs.WarmStart) && ms.WarmGranted == rs.WarmGranted &&
		ms.Debt == rs.Debt && ms.Borrowed == rs.Borrowed)) {
		rt.Fatalf("step %d app %s: memory record %v %s, redis record %v %s", step, app, ok, fmtState(ms), redisHas, fmtState(rs))
	}
	// Borrowing, L1's per-app record included.
	mb, err1 := mem.BorrowState(context.Background(), cluster, app)
	rb, err2 := red.BorrowState(context.Background(), cluster, app)
	if err1 != nil || err2 != nil || mb != rb {
		rt.Fatalf("step %d app %s: memory borrow state %+v %v, redis %+v %v", step, app, mb, err1, rb, err2)
	}
}

func fmtState(s memstore.MemoryAppState) string {
	return fmt.Sprintf("{tokens %v ts %d consumed %d requests %d last_grant %d warm_start %d warm_granted %d debt %v borrowed %v}", s.Tokens,
		s.TS.UnixMicro(), s.Consumed, s.Requests, s.LastGrant.UnixMicro(), s.WarmStart.UnixMicro(), s.WarmGranted, s.Debt, s.Borrowed)
}
