package connlimit

import "sync/atomic"

// Ticket states, in the low two bits of Ticket.state; the bits above are the generation, which
// grows by one on every Acquire of the (recycled) Ticket.
const (
	stateFree   = 0 // released (or never used): on its shard's free list or about to be
	stateActive = 1 // in flight, in its shard's list
	stateSwept  = 2 // force-released by the sweep; the holder's Release will recycle it
	stateMask   = 3
)

// Ticket is one admitted request's in-flight slot. Tickets are recycled through their shard's
// free list, so after Release the holder must drop its pointer, exactly as with a sync.Pool
// object.
//
// Release is exactly-once: the first of Release and the leak sweep to claim the ticket (one
// atomic compare-and-swap) gives the slot back; every later call is a no-op, as long as the
// pointer is not used after the ticket has been recycled for another request. A holder that
// may release from more than one place at once (say, a hijacked connection's close hook racing
// the handler's defer) takes a Handle, which carries the generation and so can never release
// a later request's slot.
type Ticket struct {
	c     *Counter
	shard *shard // fixed for the Ticket's life

	state atomic.Uint64 // generation<<2 | state
	// seen is when the sweep last found the ticket active (ns since the Counter's epoch), or
	// unseen when there was activity (Acquire or Touch) since. The request path so never reads
	// the clock; the sweep stamps what it finds active (sweep.go).
	seen atomic.Int64

	// Guarded by shard.mu while the ticket is in the shard's list.
	app        *appCounts
	prev, next *Ticket
}

// unseen is Ticket.seen after activity the sweep has not seen yet.
const unseen = -1

// activate takes a free ticket of sh (a new one when it has none), starts its next generation
// for app a and makes it findable by the sweep. It is linked before it turns active: the sweep
// and stale Releases ignore non-active tickets.
func (sh *shard) activate(c *Counter, a *appCounts) *Ticket {
	sh.mu.Lock()
	t := sh.free
	if t != nil {
		sh.free = t.next
	} else {
		t = &Ticket{c: c, shard: sh}
	}
	gen := t.state.Load()>>2 + 1
	t.seen.Store(unseen)
	t.app = a
	t.prev = nil
	t.next = sh.head
	if sh.head != nil {
		sh.head.prev = t
	}
	sh.head = t
	sh.mu.Unlock()
	t.state.Store(gen<<2 | stateActive)
	return t
}

// recycle puts t on its shard's free list; the caller holds shard.mu and t is unlinked.
func (t *Ticket) recycle() {
	t.app = nil
	t.prev = nil
	t.next = t.shard.free
	t.shard.free = t
}

// unlink removes t from its shard's list; the caller holds shard.mu.
func (t *Ticket) unlink() {
	sh := t.shard
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		sh.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
}

// Release gives the slot back. A second call, or a call after the sweep released the ticket,
// is a no-op.
func (t *Ticket) Release() {
	t.release(t.state.Load() >> 2)
}

// Touch records activity on a long request (a stream), so the leak sweep leaves it alone: an
// atomic load, and a store at most once per sweep.
func (t *Ticket) Touch() {
	if t.seen.Load() != unseen {
		t.seen.Store(unseen)
	}
}

// Handle returns a handle on this acquisition of t (see Handle).
func (t *Ticket) Handle() Handle {
	return Handle{t: t, gen: t.state.Load() >> 2}
}

// release ends generation gen of t, if that generation has not ended yet.
func (t *Ticket) release(gen uint64) {
	for {
		s := t.state.Load()
		if s>>2 != gen {
			return // a stale handle: that acquisition is long over
		}
		switch s & stateMask {
		case stateActive:
			if !t.state.CompareAndSwap(s, gen<<2|stateFree) {
				continue // the sweep got there first; look again
			}
			sh := t.shard
			sh.mu.Lock()
			a := t.app
			t.unlink()
			t.recycle()
			sh.mu.Unlock()
			a.current.Add(-1)
			t.c.cluster.current.Add(-1)
			return
		case stateSwept:
			// The sweep already gave the slot back and unlinked t; only recycling is left.
			if t.state.CompareAndSwap(s, gen<<2|stateFree) {
				sh := t.shard
				sh.mu.Lock()
				t.recycle()
				sh.mu.Unlock()
				return
			}
		default:
			return // already released
		}
	}
}

// Handle names one acquisition of a recycled Ticket. It is a small value (no allocation), and
// its Release is a no-op once that acquisition has ended, even if the Ticket has since been
// recycled for another request: the generation it carries no longer matches.
type Handle struct {
	t   *Ticket
	gen uint64
}

// Release gives the acquisition's slot back, at most once over all handles and the Ticket.
func (h Handle) Release() {
	if h.t != nil {
		h.t.release(h.gen)
	}
}

// Touch records activity, if the acquisition is still in flight.
func (h Handle) Touch() {
	if h.t != nil && h.t.state.Load() == h.gen<<2|stateActive {
		h.t.Touch()
	}
}
