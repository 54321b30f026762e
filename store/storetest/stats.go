package storetest

import (
	"context"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Statistics that travel with leases (LeaseRequest.Stats) and returns (Return.Stats), and per-app Seqs in reports
// (AppReport.Seq): applied exactly once per Seq, whichever call carries them, and answered with
// the Seq kept before (Lease.PrevSeq, ClusterState.PrevSeq).

func statsCases() []testCase {
	return []testCase{
		{"LeaseStatsAppliedOnce", leaseStatsAppliedOnce},
		{"LeaseAndReportShareSeqs", leaseAndReportShareSeqs},
		{"ReturnCarriesStats", returnCarriesStats},
		{"ReportCostFeedsUsage", reportCostFeedsUsage},
	}
}

func (e *env) leaseStats(seq uint64, requests int64) store.Lease {
	e.t.Helper()
	l, err := e.s.Lease(context.Background(), store.LeaseRequest{
		Cluster: e.cluster, App: e.app, Policy: e.policy, Factor: 1, Want: 1, Need: 0, Instance: "i1",
		Stats: store.StatsBatch{Seq: seq, Requests: requests},
	})
	if err != nil {
		e.t.Fatalf("Lease(stats seq %d, %d requests): %v", seq, requests, err)
	}
	return l
}

func leaseStatsAppliedOnce(e *env) {
	if l := e.leaseStats(10, 7); l.PrevSeq != 0 || l.Granted != 1 {
		e.t.Fatalf("first lease with statistics: %+v, want PrevSeq 0 and the grant", l)
	}
	e.wantRequests(e.app, 7)
	// Sent again (a lost reply): not added again; the lease itself still runs.
	if l := e.leaseStats(10, 7); l.PrevSeq != 10 || l.Granted != 1 {
		e.t.Fatalf("the same Seq again: %+v, want PrevSeq 10", l)
	}
	e.wantRequests(e.app, 7)
	if l := e.leaseStats(12, 3); l.PrevSeq != 10 {
		e.t.Fatalf("next Seq: PrevSeq %d, want 10", l.PrevSeq)
	}
	e.wantRequests(e.app, 10)
	// A lease without statistics changes nothing and answers no PrevSeq.
	if l := e.leaseStats(0, 0); l.PrevSeq != 0 {
		e.t.Fatalf("lease without statistics: PrevSeq %d, want 0", l.PrevSeq)
	}
	e.wantRequests(e.app, 10)
	if _, err := e.s.Lease(context.Background(), store.LeaseRequest{
		Cluster: e.cluster, App: e.app,
		Policy: e.policy, Factor: 1, Want: 1, Instance: "i1", Stats: store.StatsBatch{Seq: 13, Requests: -1},
	}); err == nil {
		e.t.Fatal("negative requests accepted")
	}
	e.wantRequests(e.app, 10)
}

func leaseAndReportShareSeqs(e *env) {
	e.leaseStats(20, 5)
	// A report carrying the app's own older Seq adds nothing; its own newer Seq adds.
	st := e.reportSeq("i1", 100, 0, store.AppReport{App: e.app, Requests: 5, Seq: 20})
	if st.PrevSeq[e.app] != 20 {
		e.t.Fatalf("report with the lease's Seq: PrevSeq %v, want 20", st.PrevSeq)
	}
	e.wantRequests(e.app, 5)
	st = e.reportSeq("i1", 101, 0, store.AppReport{App: e.app, Requests: 2, Seq: 21})
	if st.PrevSeq[e.app] != 20 {
		e.t.Fatalf("report with a newer Seq: PrevSeq %v, want 20", st.PrevSeq)
	}
	e.wantRequests(e.app, 7)
	if l := e.leaseStats(21, 2); l.PrevSeq != 21 {
		e.t.Fatalf("lease after the report: PrevSeq %d, want 21", l.PrevSeq)
	}
	e.wantRequests(e.app, 7)
}

func reportCostFeedsUsage(e *env) {
	e.withL1()
	// Report.Cost and the apps' Cost both feed the window, once per report Seq.
	st, err := e.s.Report(context.Background(), store.Report{
		Cluster: e.cluster, Instance: "i1", Seq: 5, Cost: 300,
		Apps: []store.AppReport{{App: e.app, Cost: 100}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.wantUsage(st, 0.4)
	st, err = e.s.Report(context.Background(), store.Report{Cluster: e.cluster, Instance: "i1", Seq: 5, Cost: 300})
	if err != nil {
		e.t.Fatal(err)
	}
	e.wantUsage(st, 0.4)
	if _, err := e.s.Report(context.Background(), store.Report{Cluster: e.cluster, Instance: "i1", Cost: -1}); err == nil {
		e.t.Fatal("negative cost accepted")
	}
}

func (e *env) returnStats(tokens int64, seq uint64, requests int64) error {
	return e.s.Return(context.Background(), store.Return{
		Cluster: e.cluster, App: e.app, Policy: e.policy,
		Tokens: tokens, Instance: "i1", Stats: store.StatsBatch{Seq: seq, Requests: requests},
	})
}

// A return's statistics share the app's Seqs with its leases and reports: applied once.
func returnCarriesStats(e *env) {
	e.leaseStats(30, 4)
	if err := e.returnStats(1, 31, 6); err != nil {
		e.t.Fatal(err)
	}
	e.wantRequests(e.app, 10)
	// Sent again (a lost reply), or an older Seq: not added again; the tokens still go back.
	if err := e.returnStats(1, 31, 6); err != nil {
		e.t.Fatal(err)
	}
	if err := e.returnStats(1, 30, 4); err != nil {
		e.t.Fatal(err)
	}
	e.wantRequests(e.app, 10)
	if l := e.leaseStats(32, 1); l.PrevSeq != 31 {
		e.t.Fatalf("lease after the return: PrevSeq %d, want 31", l.PrevSeq)
	}
	e.wantRequests(e.app, 11)
	// A return of no tokens is a no-op, statistics included.
	if err := e.returnStats(0, 33, 5); err != nil {
		e.t.Fatal(err)
	}
	e.wantRequests(e.app, 11)
	if err := e.returnStats(1, 34, -1); err == nil {
		e.t.Fatal("negative requests accepted")
	}
	e.wantRequests(e.app, 11)
}
