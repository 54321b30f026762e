package connlimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// instanceSlots is a SlotSource of one instance on a shared MemoryStore; heartbeat is its
// report (the live-instance set).
type instanceSlots struct {
	st    *sharedStore
	id    string
	calls atomic.Int64
	down  atomic.Bool // every lease fails, as in an outage
}

func (s *instanceSlots) LeaseSlots(ctx context.Context, app string, want, inUse, limit int64) (store.SlotLease, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return store.SlotLease{}, errors.New("the Store is unavailable")
	}
	return s.st.Load().LeaseSlots(ctx, store.SlotRequest{Cluster: "c", App: app, Instance: s.id, Want: want, Limit: limit, InUse: inUse})
}

func (s *instanceSlots) LiveInstances() int { return 2 }

func (s *instanceSlots) StoreTimeout() time.Duration { return time.Second }

// heartbeat reports, and returns whether the Store said the instance rejoined.
func (s *instanceSlots) heartbeat(t *testing.T) bool {
	t.Helper()
	st, err := s.st.Load().Report(context.Background(), store.Report{Cluster: store.ClusterPolicy{ID: "c"}, Instance: s.id})
	if err != nil {
		t.Fatal(err)
	}
	return st.Rejoined
}

// sharedStore is the instances' Store, which a test can replace by an empty one (a Redis that
// restarted without its data) while the trim loops run.
type sharedStore struct{ atomic.Pointer[memstore.Store] }

// twoInstances is two live instances on one MemoryStore, each with a Counter using its slots,
// app limit appLimit and cluster limit 100.
func twoInstances(t *testing.T, appLimit int64) slotsFleet {
	t.Helper()
	clk := clock.NewManual()
	st := new(sharedStore)
	st.Store(memstore.New(clk))
	a, b := &instanceSlots{st: st, id: "a"}, &instanceSlots{st: st, id: "b"}
	a.heartbeat(t)
	b.heartbeat(t)
	ca, cb := New(Config{App: appLimit, Cluster: 100}, clk), New(Config{App: appLimit, Cluster: 100}, clk)
	t.Cleanup(ca.Close)
	t.Cleanup(cb.Close)
	ca.UseSlots(a)
	cb.UseSlots(b)
	return slotsFleet{clk: clk, a: a, b: b, ca: ca, cb: cb}
}

// slotsFleet is what twoInstances sets up: the clock, the two instances' slot holders (a, b)
// and their Counters (ca, cb).
type slotsFleet struct {
	clk    *clock.Manual
	a, b   *instanceSlots
	ca, cb *Counter
}

// Property 13: the slots held by live instances never exceed the limit; acquiring and releasing
// inside a holding make no Store call; a dead instance's slots come back after InstanceTTL.
func TestSlotsFleetWide(t *testing.T) {
	f := twoInstances(t, 10)
	clk, a, b, ca, cb := f.clk, f.a, f.b, f.ca, f.cb

	live := []*Counter{ca, cb}
	held := func() int64 { // what the live instances hold
		var n int64
		for _, c := range live {
			for _, s := range c.Snapshot() {
				if s.App == "x" {
					n += s.Held
				}
			}
		}
		return n
	}
	var tickets []*Ticket
	acquire := func(c *Counter) bool {
		tk, r := c.Acquire("x", 0)
		if tk == nil {
			if r != store.ReasonAppLimitExceeded {
				t.Fatalf("refused with %v", r)
			}
			return false
		}
		tickets = append(tickets, tk)
		if h := held(); h > 10 {
			t.Fatalf("the instances hold %d slots of a limit of 10", h)
		}
		return true
	}
	n := 0
	for i := 0; i < 30; i++ { // alternate: both instances grow their holdings
		if acquire([]*Counter{ca, cb}[i%2]) {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("admitted %d across the fleet, want the limit 10", n)
	}
	// Inside a holding: no Store call; a full fleet's rejections stay local too.
	callsA, callsB := a.calls.Load(), b.calls.Load()
	for range 5 {
		last := tickets[len(tickets)-1]
		c := last.c
		last.Release()
		tickets = tickets[:len(tickets)-1]
		if !acquire(c) {
			t.Fatal("a released slot could not be taken again on its instance")
		}
		if acquire(ca) || acquire(cb) {
			t.Fatal("admitted beyond the limit")
		}
	}
	if a.calls.Load()+b.calls.Load() != callsA+callsB {
		t.Fatalf("%d Store calls for acquires inside the holdings", a.calls.Load()+b.calls.Load()-callsA-callsB)
	}

	// b dies holding its slots: a gets them once b's heartbeat is older than InstanceTTL.
	for _, tk := range tickets {
		if tk.c == ca {
			tk.Release()
		}
	}
	clk.Advance(store.InstanceTTL / 2) // a goes on reporting
	a.heartbeat(t)
	clk.Advance(store.InstanceTTL/2 + time.Millisecond)
	a.heartbeat(t)
	live = []*Counter{ca}
	got := 0
	for acquire(ca) {
		got++
	}
	if got != 10 {
		t.Fatalf("after b died, a admitted %d, want the whole limit 10", got)
	}
}

// Trim gives back a holding far beyond use: after idleTrims idle trims all but idleHolding, and
// after releaseTrims all of it; the other instance can then use it.
func TestSlotsTrim(t *testing.T) {
	f := twoInstances(t, 8)
	clk, ca, cb := f.clk, f.ca, f.cb
	mine := acquireAll(ca, "x", 0, 8)
	if len(mine) != 8 {
		t.Fatalf("a alone admitted %d of 8", len(mine))
	}
	if tk, _ := cb.Acquire("x", 0); tk != nil {
		t.Fatal("b admitted beyond the limit")
	}
	for _, tk := range mine {
		tk.Release()
	}
	for range idleTrims {
		ca.Trim()
	}
	clk.Advance(refusalBackoff) // b's refusal above is over
	theirs := acquireAll(cb, "x", 0, 8)
	if len(theirs) != 7 {
		t.Fatalf("with a idle (keeping one slot), b admitted %d of 8, want 7", len(theirs))
	}
	for _, tk := range theirs {
		tk.Release()
	}
	for range releaseTrims - idleTrims + 1 { // + 1: the first trim above saw the 8 in flight
		ca.Trim()
	}
	clk.Advance(refusalBackoff)
	if n := len(acquireAll(cb, "x", 0, 8)); n != 8 {
		t.Fatalf("after a's whole holding went back, b admitted %d of 8", n)
	}
}

// acquireAll tries n acquisitions of app (with max_connections limit; 0: the Counter's) on c and
// returns the tickets it got.
func acquireAll(c *Counter, app string, limit int64, n int) []*Ticket {
	var got []*Ticket
	for range n {
		if tk, _ := c.Acquire(app, limit); tk != nil {
			got = append(got, tk)
		}
	}
	return got
}

// TestSlotsSparseRequestsAskNothing: an app whose requests come seconds apart keeps a slot while
// idle, so only its first request asks the Store (it cost a grow and a give-back per request,
// two Store calls, for apps spread thin over a fleet); with fewer slots than four times the live
// instances, an idle scope keeps none, so that one instance with all the load is not short of them.
func TestSlotsSparseRequestsAskNothing(t *testing.T) {
	for _, c := range []struct {
		limit     int64
		wantCalls int64
	}{
		{limit: 8, wantCalls: 2}, // the first request's grows, the app's and the cluster's
		// idle keeps none of the app's 7 slots (2 live instances): each gap gives the slot back
		// and each later request grows again; the cluster's 100 keep one
		{limit: 7, wantCalls: 2 + 6 + 5},
	} {
		f := twoInstances(t, c.limit)
		a, ca := f.a, f.ca
		for i := range 6 {
			tk, reason := ca.Acquire("x", 0)
			if tk == nil {
				t.Fatalf("limit %d: request %d refused (%v)", c.limit, i, reason)
			}
			tk.Release()
			for range idleTrims + 1 { // seconds without a request
				ca.Trim()
			}
		}
		if got := a.calls.Load(); got != c.wantCalls {
			t.Errorf("limit %d: %d Store calls for 6 sparse requests, want %d", c.limit, got, c.wantCalls)
		}
	}
}

// pendingSlots is a SlotSource whose Store answers only when the test releases it, granting
// every holding in full; each call is announced on calls.
type pendingSlots struct {
	calls   chan struct{}
	release chan struct{}
}

func (s *pendingSlots) LeaseSlots(ctx context.Context, app string, want, inUse, limit int64) (store.SlotLease, error) {
	s.calls <- struct{}{}
	select {
	case <-s.release:
		return store.SlotLease{Held: want}, nil
	case <-ctx.Done(): // as go-redis does
		return store.SlotLease{}, ctx.Err()
	}
}

func (s *pendingSlots) LiveInstances() int { return 1 }

func (s *pendingSlots) StoreTimeout() time.Duration { return 20 * time.Millisecond }

// awaitGrow waits until no slot lease of s is in flight: the call holds slotSem until its answer
// is applied.
func awaitGrow(s *counts) {
	s.slotSem <- struct{}{}
	<-s.slotSem
}

// TestSlotLeaseOutlivesTheWait: a request whose app's and cluster's holdings must grow while the
// Store does not answer is decided locally without waiting for the answers; the answers, when
// they come, are applied, and the next request takes a slot of them without a Store call. (Cut
// short at the request's deadline, a lease from a Store slower than the timeout was never
// applied, and the fleet admitted twice its limit for as long as the Store stayed slow.)
func TestSlotLeaseOutlivesTheWait(t *testing.T) {
	src := &pendingSlots{calls: make(chan struct{}, 4), release: make(chan struct{})}
	c := New(Config{App: 10, Cluster: 100}, nil)
	t.Cleanup(c.Close)
	c.UseSlots(src)
	tk, reason := c.Acquire("a", 0)
	if tk == nil {
		t.Fatalf("refused (%v): a Store that does not answer in time leaves the decision to the local limits", reason)
	}
	tk.Release()
	for i := range 2 { // the app's and the cluster's
		select {
		case <-src.calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d slot leases were made, want 2 (the app's and the cluster's)", i)
		}
	}
	close(src.release)
	app := c.app("a")
	awaitGrow(&app.counts)
	awaitGrow(&c.cluster)
	if h, hc := app.held.Load(), c.cluster.held.Load(); h != 1 || hc != 1 {
		t.Fatalf("holdings app %d, cluster %d after the answers: want 1 and 1 (the answers applied)", h, hc)
	}
	tk, reason = c.Acquire("a", 0)
	if tk == nil {
		t.Fatalf("refused (%v) within the holding", reason)
	}
	tk.Release()
	if n := len(src.calls); n != 0 {
		t.Errorf("%d Store calls for a request within the holding, want 0", n)
	}
}

// lateSlots is an instance's SlotSource on a shared MemoryStore whose answers take delay, like
// a Redis slower than the Store timeout; like go-redis, a call whose context ends first fails.
type lateSlots struct {
	*instanceSlots
	delay time.Duration
}

func (s *lateSlots) LeaseSlots(ctx context.Context, app string, want, inUse, limit int64) (store.SlotLease, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return store.SlotLease{}, ctx.Err()
	}
	return s.instanceSlots.LeaseSlots(ctx, app, want, inUse, limit)
}

func (s *lateSlots) StoreTimeout() time.Duration { return 10 * time.Millisecond }

// TestSlotsSlowStoreKeepsTheLimit: with a Store that answers after the timeout, an instance's
// leases still land, so it knows what the others hold, and a burst of requests stays within the
// fleet's limit. (With the leases dropped at the timeout, no instance would learn what the
// others hold, and the fleet would stay above its limit for as long as the Store is slow.)
func TestSlotsSlowStoreKeepsTheLimit(t *testing.T) {
	f := twoInstances(t, 10)
	b, ca, cb := f.b, f.ca, f.cb
	var held []*Ticket
	for range 8 { // a holds 8, in use
		tk, r := ca.Acquire("x", 0)
		if tk == nil {
			t.Fatalf("a refused with %v", r)
		}
		held = append(held, tk)
	}
	slow := &lateSlots{instanceSlots: b, delay: 30 * time.Millisecond}
	cb.UseSlots(slow)

	// b's first request cannot wait for its lease: the local limits decide (half its share, 2, and
	// nothing known of a). Its lease lands afterwards and tells b what a holds.
	tk, r := cb.Acquire("x", 0)
	if tk == nil {
		t.Fatalf("b's first request refused with %v", r)
	}
	held = append(held, tk)
	awaitGrow(&cb.app("x").counts)
	if got := cb.app("x").remote.Load(); got != 8 {
		t.Fatalf("b knows of %d slots held by the others after its lease landed, want 8", got)
	}

	// A burst on b: at most the 10 of the limit in flight fleet-wide.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if tk, _ := cb.Acquire("x", 0); tk != nil {
				mu.Lock()
				held = append(held, tk)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := len(held); n > 10 {
		t.Errorf("%d in flight fleet-wide for a limit of 10", n)
	}
	for _, tk := range held {
		tk.Release()
	}
	awaitGrow(&cb.app("x").counts)
	awaitGrow(&cb.cluster)
}

// TestSlotsOutageKeepsShare: while the Store cannot be asked, each instance keeps to its share
// of the limit (limit / live instances) or its holding if larger, so the fleet stays within the
// limit plus the holdings. An outage that began while the fleet was idle let each of two
// instances take the whole limit: 20 in flight of 10.
func TestSlotsOutageKeepsShare(t *testing.T) {
	f := twoInstances(t, 10)
	a, b, ca, cb := f.a, f.b, f.ca, f.cb

	// a holds 7 before the outage (in use), b nothing.
	var held []*Ticket
	for range 7 {
		tk, r := ca.Acquire("x", 0)
		if tk == nil {
			t.Fatalf("before the outage: refused with %v", r)
		}
		held = append(held, tk)
	}
	a.down.Store(true)
	b.down.Store(true)
	count := func(c *Counter) int {
		n := 0
		for {
			tk, _ := c.Acquire("x", 0)
			if tk == nil {
				return n
			}
			n++
		}
	}
	// b never leased, so it knows nothing of a's holding: its share, 5 (it took 10 before).
	if got := count(cb); got != 5 {
		t.Errorf("b admitted %d in the outage, want its share 5", got)
	}
	// a keeps to its holding, 7, larger than its share: nothing more.
	if got := count(ca); got != 0 {
		t.Errorf("a admitted %d more beyond its holding of 7", got)
	}
	for _, tk := range held {
		tk.Release()
	}
}

// TestSlotsLimitLoweredBelowInFlight: a limit lowered below what an instance has in flight, then
// raised again, never lets the fleet go above it. (A gateway that shrank its holding to the new
// limit while its requests still run would let the other gateway take those slots once the
// limit goes back up.)
func TestSlotsLimitLoweredBelowInFlight(t *testing.T) {
	f := twoInstances(t, 100)
	clk, ca, cb := f.clk, f.ca, f.cb
	for range 4 {
		if tk, r := ca.Acquire("x", 4); tk == nil {
			t.Fatalf("a refused within the limit: %v", r)
		}
	}
	if tk, r := ca.Acquire("x", 2); tk != nil || r != store.ReasonAppLimitExceeded {
		t.Fatalf("a admitted above a lowered limit (%v, %v)", tk, r)
	}
	if s := stats(t, ca, "x"); s.Held < 4 {
		t.Fatalf("after the refusal a holds %d slots with 4 in flight", s.Held)
	}
	ca.Trim() // nor may the trim shrink it
	clk.Advance(refusalBackoff)
	if s := stats(t, ca, "x"); s.Held < 4 {
		t.Fatalf("after a trim a holds %d slots with 4 in flight", s.Held)
	}
	if n := len(acquireAll(cb, "x", 6, 5)); n != 2 {
		t.Fatalf("with 4 in flight on a, b admitted %d for a limit of 6, want 2", n)
	}
}

// TestSlotsLimitLoweredUnderLoad: a lower limit applies on a fleet whose holdings are always in
// use: requests that end are not replaced beyond the new limit, however the holdings were
// granted under the old one. (A gateway that kept admitting up to its old holding would stay
// above the new limit for as long as its clients reconnect at once.)
func TestSlotsLimitLoweredUnderLoad(t *testing.T) {
	f := twoInstances(t, 100)
	clk, ca, cb := f.clk, f.ca, f.cb
	var held []*Ticket
	for range 6 {
		for _, c := range []*Counter{ca, cb} {
			tk, r := c.Acquire("x", 12)
			if tk == nil {
				t.Fatalf("refused within the limit: %v", r)
			}
			held = append(held, tk)
		}
	}
	const lowered = 4
	reached := false
	for step := 0; len(held) > 0 && step < 100; step++ {
		held[0].Release() // one request ends; its client comes back at once, on either gateway
		held = held[1:]
		for _, c := range []*Counter{ca, cb} {
			if tk, _ := c.Acquire("x", lowered); tk != nil {
				held = append(held, tk)
			}
		}
		if len(held) <= lowered {
			reached = true
		} else if reached {
			t.Fatalf("%d in flight for a limit of %d after it was reached", len(held), lowered)
		}
		ca.Trim()
		cb.Trim()
		clk.Advance(refusalBackoff)
		if len(held) == lowered && reached {
			break
		}
	}
	if !reached {
		t.Fatalf("the fleet never came down to the lowered limit of %d", lowered)
	}
	if len(held) != lowered {
		t.Fatalf("%d in flight at the end, want the lowered limit %d", len(held), lowered)
	}
}

// TestSlotsRestatedAfterStoreLoss: after the Store lost its data (Redis restarted without it, or
// flushed), each instance's next report says it rejoined and it leases its holdings again, so
// the others cannot take the slots it still uses. (Otherwise the others would take them, after
// a FLUSHALL or a restart, and the fleet would stay above its limit for as long as the load
// runs.)
func TestSlotsRestatedAfterStoreLoss(t *testing.T) {
	f := twoInstances(t, 100)
	clk, a, b, ca, cb := f.clk, f.a, f.b, f.ca, f.cb
	const limit = 12
	inFlight := 0
	acquire := func(c *Counter) bool {
		if tk, _ := c.Acquire("x", limit); tk != nil {
			inFlight++
			return true
		}
		return false
	}
	for range 8 {
		acquire(ca)
	}
	for range 4 {
		acquire(cb)
	}
	if inFlight != limit {
		t.Fatalf("%d in flight before the loss, want %d", inFlight, limit)
	}

	a.st.Store(memstore.New(clk)) // the Store restarts empty
	clk.Advance(time.Millisecond)
	for _, x := range []struct {
		s *instanceSlots
		c *Counter
	}{{b, cb}, {a, ca}} { // b reports (and restates) first: the order the second round repairs
		if !x.s.heartbeat(t) {
			t.Fatalf("%s: the first report after the loss did not say rejoined", x.s.id)
		}
		x.c.Rejoined()
		x.c.Trim()
	}
	cb.Trim() // the next trims: the second restatement
	ca.Trim()
	clk.Advance(refusalBackoff)
	for range 10 {
		acquire(cb)
		acquire(ca)
	}
	if inFlight != limit {
		t.Fatalf("%d in flight after the Store lost the holdings, want at most the limit %d", inFlight, limit)
	}
}

// TestSlotsBurstsKeepTheirHolding: an app whose requests come in bursts of 4 once a second, all
// over by the time of the trim, keeps the slots of its bursts. A trim that looked only at what is
// in flight at its own moment would cut the holding to one, and every burst would grow it again
// slot by slot.
func TestSlotsBurstsKeepTheirHolding(t *testing.T) {
	f := twoInstances(t, 20)
	a, ca := f.a, f.ca
	for i := range 10 {
		burst := acquireAll(ca, "x", 0, 4)
		if len(burst) != 4 {
			t.Fatalf("second %d: %d of the burst admitted", i, len(burst))
		}
		for _, tk := range burst {
			tk.Release()
		}
		ca.Trim()
		if i == 0 {
			a.calls.Store(0) // the first burst grows the holdings
		}
	}
	if got := a.calls.Load(); got != 0 {
		t.Fatalf("%d Store calls for 9 more bursts of what the holding already had, want 0", got)
	}
}

// TestSlotsOfRemovedAppsGoBack: an app a reload removed keeps no idle slot, so the next sweep
// forgets it instead of leaving its holding in the Store for a minute.
func TestSlotsOfRemovedAppsGoBack(t *testing.T) {
	ca := twoInstances(t, 8).ca
	tk, _ := ca.Acquire("x", 0)
	if tk == nil {
		t.Fatal("refused")
	}
	tk.Release()
	ca.KeepApps(func(app string) bool { return app != "x" })
	ca.Trim()
	ca.Sweep()
	for _, s := range ca.Snapshot() {
		if s.App == "x" {
			t.Fatalf("the removed app is still counted, holding %d", s.Held)
		}
	}
}
