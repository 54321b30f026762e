package store

import "fmt"

// SlotRequest sets this instance's holding of one scope's slots.
type SlotRequest struct {
	Cluster  string
	App      string // the app; "" is the cluster's scope
	Instance string
	Want     int64 // the holding asked for; 0 gives every slot back
	Limit    int64 // the scope's fleet-wide limit
	// InUse is how many slots of the holding this instance's requests use now (at most Want).
	// They cannot be recalled, so the holding never drops below them, even above Limit (a limit
	// lowered below what is in flight): the Store grants the others nothing until they end.
	InUse int64
}

// SlotLease is the Store's answer: the holding granted, and what the other live instances hold.
type SlotLease struct {
	Held   int64 // max(min(Want, Limit - Others), InUse), at least 0
	Others int64 // Σ the holdings of the other live instances
}

// Validate reports a malformed SlotRequest.
func (r SlotRequest) Validate() error {
	switch {
	case r.Instance == "":
		return fmt.Errorf("slots of cluster %q: empty instance id", r.Cluster)
	case r.Want < 0 || r.Limit < 0 || r.Want > MaxAmount || r.Limit > MaxAmount:
		return fmt.Errorf("slots of %q: want %d, limit %d: must be >= 0 and <= 2^53", r.App, r.Want, r.Limit)
	case r.InUse < 0 || r.InUse > r.Want:
		return fmt.Errorf("slots of %q: in use %d: must be >= 0 and <= want (%d)", r.App, r.InUse, r.Want)
	}
	return nil
}
