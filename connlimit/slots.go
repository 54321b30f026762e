package connlimit

import (
	"context"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Fleet-wide limits through leased slots. With a SlotSource, each scope (the cluster, each app)
// holds a number of slots granted by the Store, which keeps the holdings of all live instances
// within the limit. Acquire and Release inside the holding are local. A scope whose slots run
// out asks for a larger holding (one call at a time per scope, bounded by the Store timeout);
// Trim gives back what a scope holds far beyond its use. At steady state no Store call is made
// per request, nor per app per interval. See docs/design.md, "Connection slots".

// SlotSource leases connection slots from the fleet's Store (the limiter).
type SlotSource interface {
	// LeaseSlots sets this instance's holding of app's scope ("" = the cluster) to at most want
	// and at least inUse (the slots its requests use, which cannot be recalled), giving up at
	// ctx's deadline (and at the Store timeout in any case).
	LeaseSlots(ctx context.Context, app string, want, inUse, limit int64) (store.SlotLease, error)
	// LiveInstances is the fleet's live-instance count as last known.
	LiveInstances() int
	// StoreTimeout bounds how long a request waits on a slot lease.
	StoreTimeout() time.Duration
}

// TrimInterval is how often the holdings are checked for surplus.
const TrimInterval = time.Second

// idleTrims is how many trims in a row find a scope with nothing in flight before it keeps only
// idleHolding, and releaseTrims before its whole holding goes back.
const (
	idleTrims    = 3
	releaseTrims = 60
)

// idleHolding is what an idle scope keeps until releaseTrims: one slot, so that a request that
// comes every few seconds finds it and costs no Store call, when the limit is at least four
// times the live instances; none otherwise. The idle holdings of the others then take at most a
// quarter of the limit from an instance that has all the load.
func idleHolding(limit int64, live int) int64 {
	if limit >= 4*int64(max(live, 1)) {
		return 1
	}
	return 0
}

// UseSlots makes the Counter enforce its limits fleet-wide through src, and starts trimming
// holdings every TrimInterval. Without it, limits count this instance only plus the other
// instances' reported counts (SetRemote).
func (c *Counter) UseSlots(src SlotSource) {
	c.slots.Store(&src)
	c.trimOnce.Do(func() { go c.trimLoop() })
}

// tryHeld takes one slot of the holding if current stays below it, and below what limit leaves
// beside the others' holdings. The second bound only bites after the limit was lowered: until
// trims shrink the holdings to fit, a holding granted under the old limit must not keep
// admitting up to its size while its requests come and go.
func (s *counts) tryHeld(limit int64) (int64, bool) {
	for {
		cur := s.current.Load()
		if cur >= s.held.Load() || cur+s.remote.Load() >= limit {
			return cur, false
		}
		if s.current.CompareAndSwap(cur, cur+1) {
			return cur + 1, true
		}
	}
}

// take takes one slot of scope s (its name for the Store: app, or "" for the cluster). A request
// that must grow holdings waits on the Store at most once the Store timeout in all, whether it
// grows one scope or both: dl is its deadline, set by its first grow.
func (c *Counter) take(s *counts, name string, limit int64, dl *time.Time) (int64, bool) {
	src := c.slots.Load()
	if src == nil {
		return s.tryAcquire(limit)
	}
	if n, ok := s.tryHeld(limit); ok {
		return n, true
	}
	if dl.IsZero() {
		*dl = time.Now().Add((*src).StoreTimeout())
	}
	return c.grow(*src, s, name, limit, *dl)
}

// grow asks for a larger holding: one more slot than is in use, one for each request waiting
// behind this one, plus headroom (an eighth of the use, none below 8 in flight, at most limit /
// (2 × live instances)), so that a fleet at its limit is not short of the slots other instances
// hold idle. While the Store is unavailable, this instance keeps to its holding or, if larger,
// its share of the limit (limit / live instances), and to what the others held at the last
// lease (tryRescue); while it is slower than the request may wait, to half that share
// (tryUnconfirmed).
//
// The Store call is not cut short at the request's deadline: it runs to its own end (the
// Store's background timeout) and its answer is applied when it comes, for the requests after.
// Cut at the deadline, a Store answering just slower than the timeout would never have a lease
// applied: every call would end on the client's side, and go-redis would close its connection,
// so the next call would pay a new connection's handshake and end too. The holdings and the
// others' figures would never be refreshed, and the fleet would admit more than its limit for
// as long as Redis stays slow (docs/design.md, "Connection slots").
func (c *Counter) grow(src SlotSource, s *counts, name string, limit int64, deadline time.Time) (int64, bool) {
	for range growAttempts {
		if n, ok, again := c.growOnce(src, s, name, limit, deadline); !again {
			return n, ok
		}
	}
	return s.current.Load(), false // outrun every time: as refused
}

// growAttempts bounds the leases one request makes when the slots each lease brings are taken
// by the instance's other requests before it.
const growAttempts = 3

// growOnce is one attempt of grow; again says that the lease was granted in full but this
// instance's other requests took its slots first. Deciding locally then, beyond the holding,
// would let the fleet go over its limit in a burst: the Store has granted the others what this
// instance would then use.
func (c *Counter) growOnce(src SlotSource, s *counts, name string, limit int64, deadline time.Time) (n int64, ok, again bool) {
	// Another request of this scope may be asking the Store: wait for it until the request's
	// deadline, then decide locally.
	select {
	case s.slotSem <- struct{}{}:
	default:
		s.waiting.Add(1) // the lease in flight, or the next one, asks for this request too
		t := time.NewTimer(time.Until(deadline))
		select {
		case s.slotSem <- struct{}{}:
			s.waiting.Add(-1)
			t.Stop()
		case <-t.C:
			s.waiting.Add(-1)
			n, ok := s.tryUnconfirmed(limit, src.LiveInstances())
			return n, ok, false
		}
	}
	if n, ok := s.tryHeld(limit); ok { // a concurrent grow brought slots
		<-s.slotSem
		return n, true, false
	}
	now := c.clock()
	if now < s.refusedUntil {
		<-s.slotSem
		return s.current.Load(), false, false // refused lately: rejections stay local
	}
	cur := s.current.Load()
	// For this request, the requests waiting behind it, and headroom: a burst is served by one
	// lease, not by one lease per request in a row (which outlasted the Store timeout).
	want := min(cur+1+s.waiting.Load()+headroom(cur, limit, src.LiveInstances()), limit)
	if want <= cur {
		// At the limit, or above it (a limit lowered below what is in flight): nothing to ask
		// for. Asking would shrink the holding below the slots in use, and the Store would
		// hand them to the other instances while they are still taken.
		<-s.slotSem
		return cur, false, false
	}
	done := make(chan error, 1)
	go func() { // holds slotSem until the answer is applied
		defer func() { <-s.slotSem }()
		res, err := src.LeaseSlots(context.Background(), name, want, cur, limit)
		if err == nil {
			s.held.Store(res.Held)
			s.remote.Store(res.Others)
			if res.Held < want {
				// The fleet is at the limit: ask again after refusalBackoff, not for every request.
				s.refusedUntil = c.clock() + int64(refusalBackoff)
			}
		}
		done <- err
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			n, ok := s.tryRescue(limit, src.LiveInstances())
			return n, ok, false
		}
		if n, ok := s.tryHeld(limit); ok || s.held.Load() < want {
			return n, ok, false // admitted, or refused: the fleet is at its limit
		}
		return 0, false, true // granted in full, but taken by this instance's other requests
	case <-t.C:
		// Slower than the request may wait: decided locally, with the others' figures of the
		// last lease that came back. This one is applied when it comes.
		n, ok := s.tryUnconfirmed(limit, src.LiveInstances())
		return n, ok, false
	}
}

// tryRescue takes one slot while the Store cannot be asked. The others' last known holdings are
// not enough of a bound: an outage that begins while the fleet is idle would let every instance
// take the whole limit (N times it fleet-wide). So, as the rescue buckets do for tokens, an
// instance keeps to its share of the limit, or to its holding if that is larger (the Store
// granted it, and requests may be using it).
func (s *counts) tryRescue(limit int64, live int) (int64, bool) {
	live = max(live, 1)
	return s.tryBeyondHolding(limit, (limit+int64(live)-1)/int64(live))
}

// tryUnconfirmed takes one slot for a request that cannot wait for a lease the Store is still
// answering: as tryRescue, within half the share (fairShare). Unlike in an outage, the Store
// goes on granting the other instances slots meanwhile, and it does not know of the ones taken
// here until this instance's next lease: with the whole share, three gateways starting on a
// Redis 20 ms away held 61 in flight for a limit of 40 in their first seconds.
func (s *counts) tryUnconfirmed(limit int64, live int) (int64, bool) {
	return s.tryBeyondHolding(limit, fairShare(limit, live))
}

// tryBeyondHolding takes one slot while current stays below the holding or, if larger, share,
// and current + the others' last known holdings below limit: whenever tryHeld would, and beyond
// the holding up to share.
func (s *counts) tryBeyondHolding(limit, share int64) (int64, bool) {
	bound := max(s.held.Load(), share)
	return s.tryAcquire(min(limit, bound+s.remote.Load()))
}

// giveBackTimeout bounds GiveBackSlots.
const giveBackTimeout = time.Second

// refusalBackoff is how long a scope whose holding could not grow rejects locally before it
// asks the Store again (slots others give back reach it then; its own releases at once).
const refusalBackoff = 100 * time.Millisecond

// fairShare is limit / (2 × live instances), at least 1.
func fairShare(limit int64, live int) int64 {
	return max(limit/(2*int64(max(live, 1))), 1)
}

// headroom is how many slots beyond its use (and the one it asks for) a scope holds.
func headroom(cur, limit int64, live int) int64 {
	return min(cur/8, fairShare(limit, live))
}

func (c *Counter) trimLoop() {
	t := time.NewTicker(TrimInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.restate:
		}
		c.Trim()
	}
}

// Rejoined tells the Counter that the Store lost what it held for this instance (limiter's
// ClusterState.Rejoined: Redis restarted without its data, flushed, or this instance was taken
// for dead): the next trim, at once, leases every holding again. Until then the Store lets the
// other instances take slots this one holds and uses: a fleet stayed at twice its limit after
// a one-second Redis restart. It never blocks.
func (c *Counter) Rejoined() {
	// Twice: at once, and at the next trim, after the other instances (whose reports found the
	// loss too) have stated theirs, whatever order the calls came in.
	c.restates.Store(2)
	select {
	case c.restate <- struct{}{}:
	default:
	}
}

// restateSlots leases every holding again, at least the slots in use (after Rejoined).
func (c *Counter) restateSlots(src SlotSource) {
	again := func(s *counts, name string, limit int64) {
		s.slotSem <- struct{}{}
		defer func() { <-s.slotSem }()
		held, cur := s.held.Load(), s.current.Load()
		if held == 0 && cur == 0 {
			return
		}
		res, err := src.LeaseSlots(context.Background(), name, max(held, cur), cur, limit)
		if err != nil {
			c.restates.CompareAndSwap(0, 1) // the next trim tries again
			return
		}
		s.held.Store(res.Held)
		s.remote.Store(res.Others)
	}
	again(&c.cluster, "", c.cfg.Load().Cluster)
	for name, a := range *c.apps.Load() {
		again(&a.counts, name, a.limit.Load())
	}
}

// Trim gives back surplus slots. A scope's use is the most it had in flight since the last trim
// (not the count of the moment, which would follow every dip and make requests grow the
// holding again). A scope holding more than twice its headroom (plus two) beyond its use keeps
// the headroom and one; a scope with nothing in flight for idleTrims trims in a row keeps
// idleHolding, and after releaseTrims gives everything back (an app KeepApps no longer keeps:
// at once, so that the sweep can forget it). The background loop calls it every TrimInterval;
// tests call it directly.
func (c *Counter) Trim() {
	src := c.slots.Load()
	if src == nil {
		return
	}
	if n := c.restates.Load(); n > 0 && c.restates.CompareAndSwap(n, n-1) {
		c.restateSlots(*src)
	}
	cfg := c.cfg.Load()
	live := (*src).LiveInstances()
	keep := c.keep.Load()
	c.trim(*src, &c.cluster, "", cfg.Cluster, live, false)
	for name, a := range *c.apps.Load() {
		removed := keep != nil && !(*keep)(name) // a reload removed it: nothing is kept idle
		c.trim(*src, &a.counts, name, a.limit.Load(), live, removed)
	}
}

func (c *Counter) trim(src SlotSource, s *counts, name string, limit int64, live int, removed bool) {
	s.slotSem <- struct{}{}
	defer func() { <-s.slotSem }()
	held, cur := s.held.Load(), s.current.Load()
	use := max(cur, s.recent.Swap(cur)) // the window starts again at what is in flight now
	if held == 0 {
		return
	}
	want := held
	// More than twice the headroom (plus two) beyond use: keep the headroom only.
	if room := headroom(use, limit, live); held > use+2*room+2 {
		want = use + room + 1
	}
	if use == 0 {
		s.idle++
	} else {
		s.idle = 0
	}
	if s.idle >= idleTrims {
		want = min(want, idleHolding(limit, live))
	}
	if s.idle >= releaseTrims || removed {
		want = 0
	}
	// More than the limit leaves beside the others (it was lowered): give back what is not in
	// use, so that the fleet's holdings fit it again as requests end.
	if fits := limit - s.remote.Load(); held > fits {
		want = min(want, fits)
	}
	// Never below what is in use (more than the holding, after requests admitted while the
	// Store could not be asked): the holding says what this instance really takes.
	want = max(want, cur)
	if want == held {
		return
	}
	if res, err := src.LeaseSlots(context.Background(), name, want, cur, limit); err == nil {
		s.held.Store(res.Held)
		s.remote.Store(res.Others)
	}
}

// GiveBackSlots returns every holding to the Store (at shutdown), so that the other instances
// need not wait InstanceTTL for them. It gives up after giveBackTimeout in all: a shutdown does
// not wait on a Store that does not answer.
func (c *Counter) GiveBackSlots() {
	src := c.slots.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	give := func(s *counts, name string, limit int64) {
		s.slotSem <- struct{}{}
		defer func() { <-s.slotSem }()
		if s.held.Load() > 0 && ctx.Err() == nil {
			if _, err := (*src).LeaseSlots(ctx, name, 0, 0, limit); err == nil {
				s.held.Store(0)
			}
		}
	}
	give(&c.cluster, "", c.cfg.Load().Cluster)
	for name, a := range *c.apps.Load() {
		give(&a.counts, name, a.limit.Load())
	}
}
