// Package storetest is the behavioural test suite that every store.Store implementation must
// pass: the in-memory store and the Redis store run the same cases and must give the same
// answers (docs/design.md). The suite owns a manual clock; each case uses its own cluster
// and app ids, so one Store (one Redis) may be shared by all cases.
package storetest

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Start is the suite clock's initial time: a whole second, so window arithmetic is exact.
var Start = clock.Start

// huge is a lease target no bucket can satisfy: a lease of (huge, 0) takes the whole content.
const huge = 1 << 50

// Run runs every case as a subtest. newStore returns the Store under test reading its time from
// clk (it may return one shared Store wired to each case's clock, and must clean up through
// t.Cleanup itself: the suite never calls Close).
func Run(t *testing.T, newStore func(t *testing.T, clk clock.Clock) store.Store) {
	// A per-run prefix keeps the ids of two runs against one long-lived Redis apart.
	run := fmt.Sprintf("st%x", time.Now().UnixNano())
	var seq atomic.Int64
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual()
			e := &env{
				t:   t,
				clk: clk,
				s:   newStore(t, clk),
				cluster: store.ClusterPolicy{
					ID:                 fmt.Sprintf("%s-%d", run, seq.Add(1)),
					ReservedRatio:      0.1,
					EmergencyThreshold: 0.95,
					EmergencyRatios:    [store.MaxPriority + 1]float64{1, 0.5, 0.1, 0},
				},
				app:    "app-a",
				policy: store.AppPolicy{Guaranteed: 10, Burst: 100},
			}
			c.fn(e)
		})
	}
}

type testCase struct {
	name string
	fn   func(e *env)
}

func cases() []testCase {
	return append(append(append(append(append(l2Cases(), l1Cases()...), seqCases()...), warmupCases()...), operatorCases()...),
		append(append(append(append(append(borrowCases(), overrideCases()...), statsCases()...), slotCases()...), auditCases()...), adaptiveCases()...)...)
}

// env is one case's store, clock and default ids and policies. Cluster capacity is 0 (no L1)
// unless the case sets it.
type env struct {
	t       *testing.T
	clk     *clock.Manual
	s       store.Store
	cluster store.ClusterPolicy
	app     string
	policy  store.AppPolicy

	// Borrowing fields of every lease (LeaseRequest.Unallocated, NoBorrow); zero unless set.
	unallocated float64
	noBorrow    bool
}

func (e *env) advance(d time.Duration) { e.clk.Advance(d) }

// leaseF leases for e.app at the given factor and fails the test on an error.
func (e *env) leaseF(want, need int64, factor float64) store.Lease {
	e.t.Helper()
	l, err := e.s.Lease(context.Background(), store.LeaseRequest{
		Cluster: e.cluster, App: e.app, Policy: e.policy, Factor: factor,
		Want: want, Need: need, Instance: "i1", Unallocated: e.unallocated, NoBorrow: e.noBorrow,
	})
	if err != nil {
		e.t.Fatalf("Lease(want %d, need %d, factor %v): %v", want, need, factor, err)
	}
	return l
}

func (e *env) lease(want, need int64) store.Lease {
	e.t.Helper()
	return e.leaseF(want, need, 1)
}

func (e *env) give(tokens int64) {
	e.t.Helper()
	err := e.s.Return(context.Background(), store.Return{
		Cluster: e.cluster, App: e.app, Policy: e.policy, Tokens: tokens, Instance: "i1",
	})
	if err != nil {
		e.t.Fatalf("Return(%d): %v", tokens, err)
	}
}

// content reports the whole tokens in e.app's bucket after a refill at factor, without
// changing them: it leases everything and gives it back at the same instant.
func (e *env) content(factor float64) int64 {
	e.t.Helper()
	l := e.leaseF(huge, 0, factor)
	if l.Remaining != 0 || l.Reason != store.ReasonNone || l.RetryAfter != 0 {
		e.t.Fatalf("probe lease (huge, 0) = %+v; want Remaining 0, no reason, no retry", l)
	}
	if l.Granted < 0 || float64(l.Granted) > math.Floor(e.policy.Burst) {
		e.t.Fatalf("probe: bucket holds %d tokens; want within [0, %v]", l.Granted, e.policy.Burst)
	}
	e.give(l.Granted)
	return l.Granted
}

// drain empties e.app's bucket (after a refill at factor) and returns what it held.
func (e *env) drain(factor float64) int64 {
	e.t.Helper()
	return e.leaseF(huge, 0, factor).Granted
}

func (e *env) report(instance string, inFlight int64, apps ...store.AppReport) store.ClusterState {
	e.t.Helper()
	return e.reportOver(instance, 0, store.Report{InFlight: inFlight, Apps: apps})
}

// reportOver sends rep from instance with its cost admitted over span (Report.CostSpan).
func (e *env) reportOver(instance string, span time.Duration, rep store.Report) store.ClusterState {
	e.t.Helper()
	rep.Cluster, rep.Instance, rep.CostSpan = e.cluster, instance, span
	st, err := e.s.Report(context.Background(), rep)
	if err != nil {
		e.t.Fatalf("Report(%s): %v", instance, err)
	}
	return st
}

// reportCost reports cost for e.app from instance i1.
func (e *env) reportCost(cost int64) store.ClusterState {
	e.t.Helper()
	return e.report("i1", 0, store.AppReport{App: e.app, Requests: 1, Cost: cost})
}

func (e *env) wantContent(factor float64, want int64) {
	e.t.Helper()
	if got := e.content(factor); got != want {
		e.t.Fatalf("bucket holds %d tokens; want %d", got, want)
	}
}

func (e *env) wantLease(got store.Lease, want store.Lease) {
	e.t.Helper()
	if got != want {
		e.t.Fatalf("lease = %+v; want %+v", got, want)
	}
}
