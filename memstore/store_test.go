package memstore_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
	"github.com/tierbucket/caddy-tierbucket/store/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk clock.Clock) store.Store {
		return memstore.New(clk)
	})
}

var memPolicy = store.AppPolicy{Guaranteed: 10, Burst: 100}

func memLease(t *testing.T, s *memstore.Store, app string, p store.AppPolicy, factor float64, want, need int64) store.Lease {
	t.Helper()
	l, err := s.Lease(context.Background(), store.LeaseRequest{
		Cluster: store.ClusterPolicy{ID: "c"}, App: app, Policy: p, Factor: factor, Want: want, Need: need, Instance: "i",
	})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	return l
}

func TestMemoryStoreConcurrentLeasesConserveTokens(t *testing.T) {
	clk := clock.NewManual()
	s := memstore.New(clk)
	var wg sync.WaitGroup
	held := make([]int64, 8)
	for g := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				l, err := s.Lease(context.Background(), store.LeaseRequest{
					Cluster: store.ClusterPolicy{ID: "c"}, App: "a", Policy: memPolicy, Factor: 1, Want: 7, Need: 1, Instance: "i",
				})
				if err != nil {
					t.Error(err)
					return
				}
				held[g] += l.Granted
				if i%3 == 0 && held[g] > 0 {
					if err := s.Return(context.Background(), store.Return{
						Cluster: store.ClusterPolicy{ID: "c"}, App: "a", Policy: memPolicy, Tokens: 1, Instance: "i",
					}); err != nil {
						t.Error(err)
						return
					}
					held[g]--
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for _, h := range held {
		total += h
	}
	// The clock never moved: what the goroutines hold plus what is left is the initial burst.
	left := memLease(t, s, "a", memPolicy, 1, 1<<40, 0).Granted
	if total+left != 100 {
		t.Fatalf("held %d + left %d = %d tokens; want 100", total, left, total+left)
	}
}

func TestMemoryStoreStatistics(t *testing.T) {
	clk := clock.NewManual()
	s := memstore.New(clk)
	ctx := context.Background()
	rep := store.Report{
		Cluster: store.ClusterPolicy{ID: "c"}, Instance: "i",
		Apps: []store.AppReport{{App: "a", Requests: 4, Cost: 40}},
	}
	if _, err := s.Report(ctx, rep); err != nil {
		t.Fatal(err)
	}
	st, ok := s.AppState("c", "a")
	if !ok || st.Requests != 4 || st.Consumed != 0 || st.Tokens != 0 {
		t.Fatalf("after a report alone: %+v, %v; want only Requests 4", st, ok)
	}
	memLease(t, s, "a", memPolicy, 1, 30, 1)
	memLease(t, s, "a", memPolicy, 1, 5, 1)
	if _, err := s.Report(ctx, rep); err != nil {
		t.Fatal(err)
	}
	st, ok = s.AppState("c", "a")
	want := memstore.MemoryAppState{Tokens: 65, TS: storetest.Start, Consumed: 35, Requests: 8, LastGrant: storetest.Start}
	if !ok || !st.TS.Equal(want.TS) || !st.LastGrant.Equal(want.LastGrant) {
		t.Fatalf("AppState = %+v, %v; want %+v", st, ok, want)
	}
	st.TS, st.LastGrant = want.TS, want.LastGrant
	if st != want {
		t.Fatalf("AppState = %+v, %v; want %+v", st, ok, want)
	}
	if _, ok := s.AppState("c", "other"); ok {
		t.Fatal("AppState of an app never seen: ok = true")
	}
}

func TestMemoryStoreIdleExpiry(t *testing.T) {
	clk := clock.NewManual()
	s := memstore.New(clk)
	// idle lifetime: max(60 s, 2 × 100 / 10 s) = 60 s. Factor 0 keeps the bucket empty.
	memLease(t, s, "a", memPolicy, 0, 100, 100)
	clk.Advance(59 * time.Second)
	if got := memLease(t, s, "a", memPolicy, 0, 1<<40, 0).Granted; got != 0 {
		t.Fatalf("after 59 s idle: %d tokens; want 0 (not expired)", got)
	}
	clk.Advance(60 * time.Second)
	if got := memLease(t, s, "a", memPolicy, 0, 1<<40, 0).Granted; got != 100 {
		t.Fatalf("after 60 s idle: %d tokens; want a fresh full bucket of 100", got)
	}

	// A long fill time keeps the record longer: 2 × 1000 / 1 = 2000 s.
	slow := store.AppPolicy{Guaranteed: 1, Burst: 1000}
	memLease(t, s, "slow", slow, 0, 1000, 1000)
	clk.Advance(1999 * time.Second)
	if _, ok := s.AppState("c", "slow"); !ok {
		t.Fatal("record dropped before 2 × burst / guaranteed")
	}
	clk.Advance(time.Second)
	memLease(t, s, "other", memPolicy, 1, 1, 1) // a call sweeps idle records
	if _, ok := s.AppState("c", "slow"); ok {
		t.Fatal("record kept after 2 × burst / guaranteed idle")
	}
}

// TestMemoryStoreRecordOutlivesStatsInterval: statistics that waited the caller's interval
// (here 60 s, the default) after the app's last lease reach the record they belong to, and add
// to its count; the record expires RecordIdle after the last write.
func TestMemoryStoreRecordOutlivesStatsInterval(t *testing.T) {
	clk := clock.NewManual()
	s := memstore.New(clk)
	ctx := context.Background()
	cl := store.ClusterPolicy{ID: "c"}
	lease := func(app string, seq uint64, requests int64) {
		t.Helper()
		if _, err := s.Lease(ctx, store.LeaseRequest{
			Cluster: cl, App: app, Policy: memPolicy, Factor: 1, Want: 1,
			Instance: "i", Stats: store.StatsBatch{Seq: seq, Requests: requests}, StatsInterval: time.Minute,
		}); err != nil {
			t.Fatal(err)
		}
	}
	lease("a", 1, 500)
	clk.Advance(time.Minute + time.Second) // the interval and the next report
	if _, err := s.Report(ctx, store.Report{
		Cluster: cl, Instance: "i", StatsInterval: time.Minute,
		Apps: []store.AppReport{{App: "a", Requests: 7, Seq: 2}},
	}); err != nil {
		t.Fatal(err)
	}
	if st, ok := s.AppState("c", "a"); !ok || st.Requests != 507 {
		t.Fatalf("after the flush: %+v, %v; want the 500 of the lease and the 7 of the flush", st, ok)
	}
	clk.Advance(store.RecordIdle(time.Minute) - time.Second)
	if _, ok := s.AppState("c", "a"); !ok {
		t.Fatal("record dropped before RecordIdle after the flush")
	}
	clk.Advance(time.Second)
	lease("other", 0, 0) // a call sweeps idle records
	if _, ok := s.AppState("c", "a"); ok {
		t.Fatal("record kept RecordIdle after its last write")
	}
}

func TestMemoryStoreRejectsBadInput(t *testing.T) {
	s := memstore.New(nil)
	ctx := context.Background()
	c := store.ClusterPolicy{ID: "c"}
	lease := func(mod func(*store.LeaseRequest)) error {
		r := store.LeaseRequest{Cluster: c, App: "a", Policy: memPolicy, Factor: 1, Want: 1, Need: 1, Instance: "i"}
		mod(&r)
		_, err := s.Lease(ctx, r)
		return err
	}
	for _, tc := range []struct {
		name, msg string
		err       error
	}{
		{"empty app", "empty app id", lease(func(r *store.LeaseRequest) { r.App = "" })},
		{"guaranteed 0", "guaranteed 0", lease(func(r *store.LeaseRequest) { r.Policy.Guaranteed = 0 })},
		{"burst NaN", "burst NaN", lease(func(r *store.LeaseRequest) { r.Policy.Burst = math.NaN() })},
		{"burst huge", "burst 1e+20", lease(func(r *store.LeaseRequest) { r.Policy.Burst = 1e20 })},
		{"factor negative", "factor -1", lease(func(r *store.LeaseRequest) { r.Factor = -1 })},
		{"need negative", "need -1", lease(func(r *store.LeaseRequest) { r.Need = -1 })},
		{"want negative", "want -1", lease(func(r *store.LeaseRequest) { r.Want, r.Need = -1, 0 })},
		{"capacity Inf", "capacity +Inf", lease(func(r *store.LeaseRequest) { r.Cluster.Capacity = math.Inf(1) })},
		{"return burst 0", "burst 0", s.Return(ctx, store.Return{Cluster: c, App: "a", Policy: store.AppPolicy{Guaranteed: 1}, Tokens: 1})},
		{"burst below guaranteed", "burst 5: must be a number >= guaranteed (10)", lease(func(r *store.LeaseRequest) { r.Policy.Burst = 5 })},
		{"report no instance", "empty instance id", func() error { _, err := s.Report(ctx, store.Report{Cluster: c}); return err }()},
		{"report negative cost", "cost -5", func() error {
			_, err := s.Report(ctx, store.Report{Cluster: c, Instance: "i", Apps: []store.AppReport{{App: "a", Cost: -5}}})
			return err
		}()},
		{"report negative in-flight", "in-flight -1", func() error {
			_, err := s.Report(ctx, store.Report{Cluster: c, Instance: "i", InFlight: -1})
			return err
		}()},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.msg) {
			t.Errorf("%s: error %v; want one mentioning %q", tc.name, tc.err, tc.msg)
		}
	}
}

func TestFactors(t *testing.T) {
	c := store.ClusterPolicy{Capacity: 1000, EmergencyThreshold: 0.95, EmergencyRatios: [4]float64{1, 0.5, 0.1, 0}}
	for _, tc := range []struct {
		c         store.ClusterPolicy
		u         float64
		emergency bool
		want      [4]float64
	}{
		{c, 0, false, [4]float64{1, 1, 1, 1}},
		{c, 0.8999, false, [4]float64{1, 1, 1, 1}},
		{c, 0.9, false, [4]float64{1, 1, 1, 1}},
		{c, 0.5, true, [4]float64{1, 0.5, 0.1, 0}},
		{store.ClusterPolicy{EmergencyThreshold: 0.95}, 5, false, [4]float64{1, 1, 1, 1}}, // no L1
		{store.ClusterPolicy{EmergencyRatios: [4]float64{1, 0.5, 0.1, 0}}, 0, true, [4]float64{1, 0.5, 0.1, 0}},
	} {
		if got := memstore.Factors(tc.c, tc.u, tc.emergency); got != tc.want {
			t.Errorf("Factors(%+v, %v, %v) = %v; want %v", tc.c, tc.u, tc.emergency, got, tc.want)
		}
	}
	// In overload every factor lies in [0, 1] and falls with priority and with u.
	rapid.Check(t, func(t *rapid.T) {
		thr := rapid.Float64Range(0.91, 1.5).Draw(t, "thr")
		u1 := rapid.Float64Range(0.9, thr).Draw(t, "u1")
		u2 := rapid.Float64Range(u1, thr).Draw(t, "u2")
		c := store.ClusterPolicy{Capacity: 1, EmergencyThreshold: thr}
		f1, f2 := memstore.Factors(c, u1, false), memstore.Factors(c, u2, false)
		if f1[0] != 1 {
			t.Fatalf("factor(0) = %v at u %v; want 1", f1[0], u1)
		}
		for p := range f1 {
			if f1[p] < 0 || f1[p] > 1 || f2[p] > f1[p] || (p > 0 && f1[p] > f1[p-1]) {
				t.Fatalf("u %v: %v, u %v: %v: not in [0,1] or not monotonic", u1, f1, u2, f2)
			}
		}
	})
}

// TestMemoryStoreTokensBounded checks that tokens stay within bounds: over random sequences of leases,
// returns, time steps and policy changes, L2 tokens stay within [0, burst].
func TestMemoryStoreTokensBounded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := clock.NewManual()
		s := memstore.New(clk)
		ctx := context.Background()
		c := store.ClusterPolicy{ID: "c"}
		p := store.AppPolicy{Guaranteed: 10, Burst: 100}
		for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
			_ = i
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				want := rapid.Int64Range(0, 500).Draw(t, "want")
				need := rapid.Int64Range(0, want).Draw(t, "need")
				factor := rapid.Float64Range(0, 1).Draw(t, "factor")
				l, err := s.Lease(ctx, store.LeaseRequest{Cluster: c, App: "a", Policy: p, Factor: factor, Want: want, Need: need, Instance: "i"})
				if err != nil {
					t.Fatal(err)
				}
				if l.Granted < 0 || l.Remaining < 0 || float64(l.Granted+l.Remaining) > p.Burst {
					t.Fatalf("lease %+v out of [0, %v]", l, p.Burst)
				}
			case 1:
				n := rapid.Int64Range(-10, 1000).Draw(t, "return")
				if err := s.Return(ctx, store.Return{Cluster: c, App: "a", Policy: p, Tokens: n, Instance: "i"}); err != nil {
					t.Fatal(err)
				}
			case 2:
				clk.Advance(time.Duration(rapid.Int64Range(0, 30_000_000).Draw(t, "µs")) * time.Microsecond)
				continue // no write: the stored tokens are those of the last call's policy
			case 3:
				p.Guaranteed = rapid.Float64Range(0.001, 1000).Draw(t, "guaranteed")
				p.Burst = rapid.Float64Range(p.Guaranteed, 5000).Draw(t, "burst")
				if err := s.Return(ctx, store.Return{Cluster: c, App: "a", Policy: p, Tokens: 1, Instance: "i"}); err != nil {
					t.Fatal(err)
				}
			}
			if st, ok := s.AppState("c", "a"); ok && (st.Tokens < 0 || st.Tokens > p.Burst || math.IsNaN(st.Tokens)) {
				t.Fatalf("tokens %v out of [0, %v]", st.Tokens, p.Burst)
			}
		}
	})
}
