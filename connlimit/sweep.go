package connlimit

// Sweep force-releases the tickets idle (no Acquire or Touch) for longer than IdleTimeout and
// counts them as leaked, per app and for the cluster. Their holders' later Release is a no-op.
// The background loop calls it every SweepInterval; tests call it directly with their clock.
func (c *Counter) Sweep() {
	now := c.clock()
	idle := int64(c.cfg.Load().IdleTimeout)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock() // held for a walk over one shard's list: no I/O, no allocation
		for t := sh.head; t != nil; {
			next := t.next
			if s := t.state.Load(); s&stateMask == stateActive && now-t.last.Load() > idle &&
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
}
