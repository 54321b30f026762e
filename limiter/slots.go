package limiter

import (
	"context"
	"fmt"
	"time"
)

// Connection slots: fleet-wide in-flight limits without a Store call per request. Each instance
// holds a number of slots per scope (an app, or the cluster); acquiring and releasing inside
// the holding are local, and the instance asks the Store for a new holding only when its slots
// run out or it holds far more than it uses. The Store grants a holding only while the
// holdings of all live instances stay within the limit (docs/design.md, "Connection slots").

// SlotRequest sets this instance's holding of one scope's slots.
type SlotRequest struct {
	Cluster  string
	App      string // the app; "" is the cluster's scope
	Instance string
	Want     int64 // the holding asked for; 0 gives every slot back
	Limit    int64 // the scope's fleet-wide limit
}

// SlotLease is the Store's answer: the holding granted, and what the other live instances hold.
type SlotLease struct {
	Held   int64 // min(Want, Limit - Others), at least 0
	Others int64 // Σ the holdings of the other live instances
}

// Validate reports a malformed SlotRequest.
func (r SlotRequest) Validate() error {
	switch {
	case r.Instance == "":
		return fmt.Errorf("slots of cluster %q: empty instance id", r.Cluster)
	case r.Want < 0 || r.Limit < 0 || r.Want > maxAmount || r.Limit > maxAmount:
		return fmt.Errorf("slots of %q: want %d, limit %d: must be >= 0 and <= 2^53", r.App, r.Want, r.Limit)
	}
	return nil
}

// LeaseSlots asks the Store for a holding of want slots of app's scope ("" for the cluster),
// bounded by the Store timeout. It is connlimit's SlotSource.
func (l *Limiter) LeaseSlots(app string, want, limit int64) (SlotLease, error) {
	if l.closed.Load() {
		return SlotLease{}, ErrClosed
	}
	if l.Level() == LevelFailOpen {
		return SlotLease{}, errFailOpen // the probe brings the Store back; no request waits on it
	}
	s := l.snap()
	// Slot leases do not feed the degradation level: token leases and reports do. (Fed with
	// slot leases cut short at the Store timeout, the level under a slow Store misjudged the
	// Store and the fleet over-admitted tokens in the fault matrix.)
	var res SlotLease
	err := l.callStore(func(ctx context.Context) (err error) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		defer cancel()
		res, err = l.store.LeaseSlots(ctx, SlotRequest{Cluster: s.cfg.Cluster.ID, App: app,
			Instance: s.cfg.Instance, Want: want, Limit: limit})
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
