package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Connection slots: fleet-wide in-flight limits without a Store call per request. Each instance
// holds a number of slots per scope (an app, or the cluster); acquiring and releasing inside
// the holding are local, and the instance asks the Store for a new holding only when its slots
// run out or it holds far more than it uses. The Store grants a holding only while the
// holdings of all live instances stay within the limit (docs/design.md, "Connection slots").

// LeaseSlots asks the Store for a holding of want slots of app's scope ("" for the cluster), of
// which inUse are in use (the holding stays at least that), bounded by ctx and by the
// background timeout of Store calls that no request waits on (at least a second): a request
// waits on a slot lease at most StoreTimeout (connlimit), but the lease itself runs to its end
// and is applied, so that a Store slower than StoreTimeout still refreshes the holdings. It is
// connlimit's SlotSource.
func (l *Limiter) LeaseSlots(ctx context.Context, app string, want, inUse, limit int64) (store.SlotLease, error) {
	if l.closed.Load() {
		return store.SlotLease{}, ErrClosed
	}
	if l.Level() == LevelFailOpen {
		return store.SlotLease{}, errFailOpen // the probe brings the Store back; no request waits on it
	}
	s := l.snap()
	// Slot leases do not feed the degradation level: token leases and reports do. Requests stop
	// waiting for a slot lease at the Store timeout, so its latency would misjudge a slow Store,
	// and the level sizes token leases.
	var res store.SlotLease
	err := l.callStore(context.Background(), func(context.Context) (err error) {
		ctx, cancel := context.WithTimeout(ctx, l.bgTimeout())
		defer cancel()
		res, err = l.store.LeaseSlots(ctx, store.SlotRequest{
			Cluster: s.cfg.Cluster.ID, App: app,
			Instance: s.cfg.Instance, Want: want, Limit: limit, InUse: inUse,
		})
		return err
	})
	return res, err
}

// errFailOpen is LeaseSlots' answer while the Store is known to be unavailable.
var errFailOpen = fmt.Errorf("limiter: the Store is unavailable (fail_open)")

// StoreTimeout is how long a request may wait on the Store (connlimit's slot leases).
func (l *Limiter) StoreTimeout() time.Duration { return l.snap().cfg.StoreTimeout }

// LiveInstances is the fleet's live-instance count from the last report (at least 1).
func (l *Limiter) LiveInstances() int { return max(l.state.Load().LiveInstances, 1) }
