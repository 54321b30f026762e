package limiter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func TestUnallocatedRate(t *testing.T) {
	cfg := baseConfig() // apps guaranteed 100 + 100
	if got := unallocatedRate(cfg); got != 0 {
		t.Fatalf("without capacity: %v, want 0", got)
	}
	cfg.Cluster.Capacity, cfg.Cluster.ReservedRatio = 1000, 0.1
	if got := unallocatedRate(cfg); got != 700 {
		t.Fatalf("capacity 1000, reserve 0.1: %v, want 700", got)
	}
	cfg.Cluster.Capacity = 200
	if got := unallocatedRate(cfg); got != 0 {
		t.Fatalf("over-allocated: %v, want 0", got)
	}
}

// leaseRecorder keeps the last LeaseRequest.
type leaseRecorder struct {
	store.Store
	mu   sync.Mutex
	last store.LeaseRequest
}

func (r *leaseRecorder) Lease(ctx context.Context, req store.LeaseRequest) (store.Lease, error) {
	r.mu.Lock()
	r.last = req
	r.mu.Unlock()
	return r.Store.Lease(ctx, req)
}

// The limiter borrows through the Store: it passes the pool's rate from its config, and no
// borrowing in an emergency.
func TestLimiterBorrows(t *testing.T) {
	c := clock.NewManual()
	rec := &leaseRecorder{Store: newStore(c)}
	cfg := baseConfig()
	cfg.Cluster.Capacity, cfg.Cluster.ReservedRatio = 1000, 0.1
	p := pol(0.01, 20, 0) // one token per 100 s: nothing refills during the test
	p.MaxBorrow = 10
	cfg.Apps["slow"] = p
	l := testLimiter(t, cfg, rec, c, false)
	a := mustApp(t, l, "slow")
	ctx := context.Background()

	if d := a.Take(ctx, 20, 0); !d.Allowed {
		t.Fatalf("20-token take = %+v, want admitted", d)
	}
	if d := a.Take(ctx, 6, 0); !d.Allowed {
		t.Fatalf("6-token take on an empty bucket = %+v, want admitted on borrowed tokens", d)
	}
	rec.mu.Lock()
	req := rec.last
	rec.mu.Unlock()
	if want := 1000*0.9 - 200 - 0.01; req.Unallocated != want || req.NoBorrow {
		t.Fatalf("lease request Unallocated %v NoBorrow %v, want %v false", req.Unallocated, req.NoBorrow, want)
	}
	// The app keeps L2's figures of its last lease: borrowed 6, debt ceil(6 × 1.2).
	if b, d := a.Borrowing(); b != 6 || d != 8 {
		t.Fatalf("after borrowing 6: Borrowing() = %v, %v; want 6, 8", b, d)
	}
	wantStats(t, l, "slow", 6, 8)
	// max_borrow 10 - borrowed 6 < 5 (after the local retry-after of the short lease).
	c.Advance(time.Second)
	if d := a.Take(ctx, 5, 0); d.Allowed || d.Reason != store.ReasonBorrowLimitExceeded {
		t.Fatalf("5-token take over max_borrow = %+v, want borrow_limit_exceeded", d)
	}
	// The refused lease's refill (0.01 tokens) went to the empty bucket, not to the debt (debt
	// is paid by refill beyond the burst): the figures follow L2's.
	if b, d := a.Borrowing(); d != 8 || b != 6 {
		t.Fatalf("after a refused lease: Borrowing() = %v, %v; want 6, 8", b, d)
	}

	// In an emergency the limiter asks for no borrowing.
	st := *l.state.Load()
	st.Emergency = true
	l.state.Store(&st)
	b := mustApp(t, l, "a")
	b.Take(ctx, 1, 0)
	rec.mu.Lock()
	req = rec.last
	rec.mu.Unlock()
	if req.App != "a" || !req.NoBorrow {
		t.Fatalf("lease request in an emergency = %+v, want NoBorrow", req)
	}
}

// A borrowing app is not held back by its own short leases: every request beyond its bucket
// borrows its shortfall until max_borrow is reached, and only that refusal stops it.
func TestBorrowerGetsMaxBorrowBeyondBurst(t *testing.T) {
	c := clock.NewManual()
	cfg := baseConfig()
	cfg.Cluster.Capacity, cfg.Cluster.ReservedRatio = 10000, 0.1
	p := pol(50, 50, 0)
	p.MaxBorrow = 200
	cfg.Apps["b"] = p
	l := testLimiter(t, cfg, memstore.New(c), c, false)
	a := mustApp(t, l, "b")
	reasons := map[store.Reason]int{}
	for range 300 {
		reasons[a.Take(context.Background(), 1, 0).Reason]++
	}
	if reasons[store.ReasonNone] != 250 || reasons[store.ReasonBorrowLimitExceeded] != 50 {
		t.Fatalf("decisions %v, want 250 admitted (burst 50 + max_borrow 200) and 50 borrow_limit_exceeded", reasons)
	}
}

// wantStats requires the app's statistics to carry borrowed and debt.
func wantStats(t *testing.T, l *Limiter, label string, borrowed, debt float64) {
	t.Helper()
	for _, s := range l.Stats() {
		if s.Label == label {
			if s.Borrowed != borrowed || s.Debt != debt {
				t.Fatalf("Stats %s: borrowed %v debt %v; want %v %v", label, s.Borrowed, s.Debt, borrowed, debt)
			}
			return
		}
	}
	t.Fatalf("Stats: no %s", label)
}
