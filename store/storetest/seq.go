package storetest

import (
	"context"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Report.Seq cases: a report's figures count once per Seq, while heartbeats and in-flight
// counts are refreshed by every report. Usage is checked through ClusterState; requests
// through RequestCounter when the Store implements it.

// RequestCounter is implemented by Stores that can tell an app's total reported requests (its
// L2 record's statistics). The suite uses it to check that requests count once per Seq.
type RequestCounter interface {
	AppRequests(ctx context.Context, cluster, app string) (int64, error)
}

func seqCases() []testCase {
	return []testCase{
		{"DuplicateSeqAddsNothing", duplicateSeqAddsNothing},
		{"HigherSeqApplies", higherSeqApplies},
		{"SeqKeptPerApp", seqKeptPerApp},
		{"PrevSeqPerApp", prevSeqPerApp},
		{"SeqForgottenAfterTTL", seqForgottenAfterTTL},
		{"LargeSeqsExact", largeSeqsExact},
	}
}

// reportSeq reports with Seq seq for the cluster and, unless an app has its own, for its apps.
func (e *env) reportSeq(instance string, seq uint64, inFlight int64, apps ...store.AppReport) store.ClusterState {
	e.t.Helper()
	for i := range apps {
		if apps[i].Seq == 0 {
			apps[i].Seq = seq
		}
	}
	st, err := e.s.Report(context.Background(), store.Report{
		Cluster: e.cluster, Instance: instance, Apps: apps, InFlight: inFlight, Seq: seq,
	})
	if err != nil {
		e.t.Fatalf("Report(%s, seq %d): %v", instance, seq, err)
	}
	return st
}

// wantRequests checks an app's reported requests, if the Store can tell them.
func (e *env) wantRequests(app string, want int64) {
	e.t.Helper()
	rc, ok := e.s.(RequestCounter)
	if !ok {
		return
	}
	got, err := rc.AppRequests(context.Background(), e.cluster.ID, app)
	if err != nil {
		e.t.Fatalf("AppRequests(%s): %v", app, err)
	}
	if got != want {
		e.t.Fatalf("app %s: %d requests reported; want %d", app, got, want)
	}
}

func (e *env) wantUsage(st store.ClusterState, usage float64) {
	e.t.Helper()
	if st.Usage != usage {
		e.t.Fatalf("usage %v; want %v", st.Usage, usage)
	}
}

func xApp(requests, cost, inFlight int64) store.AppReport {
	return store.AppReport{App: "x", Requests: requests, Cost: cost, InFlight: inFlight}
}

// duplicateSeqAddsNothing: a report sent again with its Seq (or an older one) adds no cost and
// no requests, but its heartbeat and in-flight counts are taken.
func duplicateSeqAddsNothing(e *env) {
	e.withL1()
	e.wantUsage(e.reportSeq("a", 7, 2, xApp(3, 300, 1)), 0.3)
	e.wantRequests("x", 3)
	e.wantUsage(e.reportSeq("a", 7, 5, xApp(3, 300, 4)), 0.3)
	e.wantUsage(e.reportSeq("a", 6, 5, xApp(3, 300, 4)), 0.3)
	e.wantRequests("x", 3)
	st := e.reportSeq("b", 1, 0, xApp(0, 0, 0))
	e.wantUsage(st, 0.3)
	e.wantRemote(st, 5, map[string]int64{"x": 4}) // the duplicate's in-flight counts
	e.wantLive(st, 2)

	e.advance(2500 * time.Millisecond)
	e.reportSeq("a", 7, 5, xApp(3, 300, 4))
	e.advance(time.Second) // a's first report is 3.5 s old, its duplicate 1 s
	e.wantLive(e.reportSeq("b", 2, 0), 2)
	e.wantRequests("x", 3)
}

// higherSeqApplies: a later Seq, an unnumbered report (Seq 0) and another instance's Seqs
// all count.
func higherSeqApplies(e *env) {
	e.withL1()
	e.wantUsage(e.reportSeq("a", 7, 0, xApp(3, 300, 0)), 0.3)
	e.wantUsage(e.reportSeq("a", 8, 0, xApp(2, 200, 0)), 0.5)
	e.wantRequests("x", 5)
	e.wantUsage(e.reportSeq("a", 0, 0, xApp(1, 100, 0)), 0.6)
	e.wantUsage(e.reportSeq("a", 0, 0, xApp(1, 100, 0)), 0.7)
	e.wantUsage(e.reportSeq("b", 1, 0, xApp(1, 100, 0)), 0.8) // b's Seqs are b's own
	e.wantRequests("x", 8)
	e.wantUsage(e.reportSeq("a", 8, 0, xApp(2, 200, 0)), 0.8) // still a duplicate after Seq 0
	e.wantRequests("x", 8)
}

// seqKeptPerApp: each app record keeps its own Seqs, so a resend of a report that was applied
// only in part (a Redis pipeline failing half way) completes it.
func seqKeptPerApp(e *env) {
	e.withL1()
	e.wantUsage(e.reportSeq("a", 3, 0, xApp(3, 300, 0)), 0.3)
	y := store.AppReport{App: "y", Requests: 4, Cost: 100}
	e.wantUsage(e.reportSeq("a", 3, 0, xApp(3, 300, 0), y), 0.3)
	e.wantRequests("x", 3)
	e.wantRequests("y", 4)
	e.wantUsage(e.reportSeq("a", 3, 0, xApp(3, 300, 0), y), 0.3)
	e.wantRequests("y", 4)
}

// prevSeqPerApp: a numbered report's answer carries, per app, the Seq the Store had applied for
// the instance before it (0 for none), the limiter's evidence that acknowledged statistics
// were lost; an unnumbered report carries none.
func prevSeqPerApp(e *env) {
	want := func(st store.ClusterState, app string, seq uint64) {
		e.t.Helper()
		if got, ok := st.PrevSeq[app]; !ok || got != seq {
			e.t.Fatalf("PrevSeq[%s] = %d (present %v); want %d (all: %v)", app, got, ok, seq, st.PrevSeq)
		}
	}
	y := store.AppReport{App: "y", Requests: 1}
	st := e.reportSeq("a", 5, 0, xApp(1, 1, 0))
	want(st, "x", 0)
	st = e.reportSeq("a", 7, 0, xApp(1, 1, 0), y)
	want(st, "x", 5)
	want(st, "y", 0)
	st = e.reportSeq("a", 7, 0, xApp(1, 1, 0), y) // a resend
	want(st, "x", 7)
	st = e.reportSeq("b", 2, 0, xApp(1, 1, 0)) // Seqs are per instance
	want(st, "x", 0)
	if st = e.reportSeq("a", 0, 0, xApp(1, 1, 0)); len(st.PrevSeq) != 0 {
		e.t.Fatalf("an unnumbered report's PrevSeq: %v", st.PrevSeq)
	}
}

// seqForgottenAfterTTL: an instance's last Seq is kept while it sends numbered reports at
// most ReportSeqTTL apart (a duplicate renews it), and forgotten after.
func seqForgottenAfterTTL(e *env) {
	e.withL1()
	e.wantUsage(e.reportSeq("a", 9, 0, store.AppReport{App: "x", Cost: 300}), 0.3)
	e.advance(store.ReportSeqTTL)
	e.wantUsage(e.reportSeq("a", 9, 0, store.AppReport{App: "x", Cost: 300}), 0)
	e.advance(store.ReportSeqTTL + time.Millisecond)
	e.wantUsage(e.reportSeq("a", 9, 0, store.AppReport{App: "x", Cost: 300}), 0.3)
}

// largeSeqsExact: Seqs are compared exactly up to 2^53 (Lua numbers are doubles); above, a
// report is refused.
func largeSeqsExact(e *env) {
	e.withL1()
	const top = 1 << 53
	e.wantUsage(e.reportSeq("a", top-1, 0, xApp(1, 100, 0)), 0.1)
	e.wantUsage(e.reportSeq("a", top, 0, xApp(1, 100, 0)), 0.2)
	e.wantUsage(e.reportSeq("a", top-1, 0, xApp(1, 100, 0)), 0.2)
	e.wantUsage(e.reportSeq("a", top, 0, xApp(1, 100, 0)), 0.2)
	e.wantRequests("x", 2)
	_, err := e.s.Report(context.Background(), store.Report{Cluster: e.cluster, Instance: "a", Seq: top + 1})
	if err == nil {
		e.t.Fatalf("Report with Seq 2^53 + 1: no error")
	}
}
