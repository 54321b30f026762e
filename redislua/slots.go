package redislua

import (
	"context"
	"fmt"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// LeaseSlots sets the instance's holding of one scope's connection slots (lease_slots.lua). The
// holdings live in the cluster's slot beside the nodes set, so the script can tell live holders
// from dead ones; slot leases are rare (a holding covers many requests), so they add little to
// that slot's load.
func (s *Store) LeaseSlots(ctx context.Context, r store.SlotRequest) (store.SlotLease, error) {
	if err := r.Validate(); err != nil {
		return store.SlotLease{}, fmt.Errorf("redislua: %w", err)
	}
	vals, err := leaseSlotsScript.Run(ctx, s.client, []string{s.keys.slots(r.Cluster, r.App), s.keys.nodes(r.Cluster), s.keys.l1(r.Cluster)},
		s.nowArg(), r.Instance, r.Want, r.Limit, store.InstanceTTL.Microseconds(), r.InUse).Slice()
	if err != nil {
		s.failed()
		return store.SlotLease{}, fmt.Errorf("redislua: lease slots: %w", s.classify(err))
	}
	if len(vals) != 2 {
		return store.SlotLease{}, fmt.Errorf("redislua: lease slots: unexpected reply %v", vals)
	}
	held, _ := vals[0].(int64)
	others, _ := vals[1].(int64)
	return store.SlotLease{Held: held, Others: others}, nil
}
