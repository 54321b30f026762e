package store

import "fmt"

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
	case r.Want < 0 || r.Limit < 0 || r.Want > MaxAmount || r.Limit > MaxAmount:
		return fmt.Errorf("slots of %q: want %d, limit %d: must be >= 0 and <= 2^53", r.App, r.Want, r.Limit)
	}
	return nil
}
