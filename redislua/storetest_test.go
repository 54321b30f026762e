package redislua

import (
	"testing"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
	"github.com/tierbucket/caddy-tierbucket/store/storetest"
)

// The behavioural suite of every store.Store, against a real Redis: each case gets a Store
// on the shared server (or cluster) reading the case's manual clock.

func TestStoreSuiteStandalone(t *testing.T) {
	c := standaloneClient(t)
	storetest.Run(t, func(t *testing.T, clk clock.Clock) store.Store {
		return New(c, uniquePrefix(t), WithClock(clk))
	})
}

func TestStoreSuiteCluster(t *testing.T) {
	c := clusterClient(t)
	storetest.Run(t, func(t *testing.T, clk clock.Clock) store.Store {
		return New(c, uniquePrefix(t), WithClock(clk))
	})
}
