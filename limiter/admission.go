package limiter

import (
	"fmt"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Admission checks that the configured apps' guarantees fit the cluster's unreserved capacity:
// Σ guaranteed <= (1 - reserved_ratio) × capacity, the starting figure when the capacity is
// learned (always true without L1). The `app *`
// template is not counted: it may stand for any number of buckets, and unknown traffic is what
// the reserve is for. The error is reported on the field "apps" (the admin API names the field
// the operator changed instead).
func (c Config) Admission() store.FieldErrors {
	capacity := c.Cluster.AdmissionCapacity()
	if capacity <= 0 {
		return nil
	}
	sum := 0.0
	for _, p := range c.Apps {
		sum += p.Guaranteed
	}
	limit := (1 - c.Cluster.ReservedRatio) * capacity
	if sum <= limit {
		return nil
	}
	return store.FieldErrors{{Field: "apps", Problem: fmt.Sprintf(
		"sum of guaranteed (%v) exceeds (1 - reserved_ratio) × capacity = %v", sum, limit)}}
}
