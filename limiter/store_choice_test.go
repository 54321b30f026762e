package limiter

import (
	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// newStore is the L2 the limiter tests run against.
func newStore(c *clock.Manual) store.Store { return memstore.New(c) }
