// Package instance is one cluster's limiter in this process, built on its Store: the in-flight
// counter and the limiter wired together, and closed in the order that gives everything back.
// The Caddy plugin's shared cluster state (internal/cluster) and the Go library (ratelimit)
// both stand on it.
package instance

import (
	"errors"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Parts are a cluster's running parts in this process.
type Parts struct {
	Limiter *limiter.Limiter
	Conns   *connlimit.Counter
	store   store.Store
}

// Start builds the in-flight counter (cc) and the limiter (lc) on st, which the Parts own from
// then on, even when Start fails. The limiter calls the Store through calls (st itself, or st
// wrapped: with metrics, say); nil is st. The in-flight counts travel with the limiter's
// reports, and fleet-wide in-flight limits use its leased slots. Start makes no Store call.
func Start(lc limiter.Config, cc connlimit.Config, st, calls store.Store) (*Parts, error) {
	if calls == nil {
		calls = st
	}
	conns := connlimit.New(cc, nil)
	lc.Connections = conns
	lim, err := limiter.New(lc, calls)
	if err != nil {
		conns.Close()
		_ = st.Close()
		return nil, err
	}
	conns.UseSlots(lim)
	conns.KeepApps(lim.Configured)
	return &Parts{Limiter: lim, Conns: conns, store: st}, nil
}

// Close gives this instance's in-flight slots and unspent tokens back to the Store, sends the
// last statistics and report (the instance leaves the fleet), and closes the Store.
func (p *Parts) Close() error {
	p.Conns.GiveBackSlots()
	limErr := p.Limiter.Close()
	p.Conns.Close()
	return errors.Join(limErr, p.store.Close())
}
