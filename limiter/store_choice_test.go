package limiter

// newStore is the L2 the limiter tests run against.
func newStore(c *manualClock) Store { return NewMemoryStore(c.Now) }
