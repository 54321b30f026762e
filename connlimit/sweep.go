package connlimit

// Sweep force-releases the tickets idle (no Acquire or Touch) for longer than IdleTimeout and
// counts them as leaked, per app and for the cluster. Their holders' later Release is a no-op.
// The background loop calls it every SweepInterval; tests call it directly with their clock.
//
// Activity is timed by the sweeps, not by the request path: a ticket active since the last
// sweep is stamped with this sweep's time, and released by the first sweep more than
// IdleTimeout after its stamp. So a ticket is never released before IdleTimeout without
// activity, and at most one SweepInterval later than if every activity were timed.
func (c *Counter) Sweep() {
	now := c.clock()
	idle := int64(c.cfg.Load().IdleTimeout)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock() // held for a walk over one shard's list: no I/O, no allocation
		for t := sh.head; t != nil; {
			next := t.next
			s := t.state.Load()
			seen := t.seen.Load()
			if seen == unseen {
				t.seen.CompareAndSwap(unseen, now)
			} else if s&stateMask == stateActive && now-seen > idle &&
				t.state.CompareAndSwap(s, s&^stateMask|stateSwept) {
				// t.app is stable: recycling t needs this lock to link it again.
				a := t.app
				t.unlink()
				a.current.Add(-1)
				a.leaked.Add(1)
				c.cluster.current.Add(-1)
				c.cluster.leaked.Add(1)
			}
			t = next
		}
		sh.mu.Unlock()
	}
	c.forgetApps()
}
