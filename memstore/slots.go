package memstore

import (
	"context"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// LeaseSlots sets the instance's holding of one scope's connection slots (see Store.LeaseSlots).
// Holdings live in the cluster ledger (Redis: the :slots hashes in the cluster's slot, beside
// the nodes set that says who is live).
func (m *Store) LeaseSlots(ctx context.Context, r store.SlotRequest) (store.SlotLease, error) {
	if err := ctx.Err(); err != nil {
		return store.SlotLease{}, err
	}
	if err := r.Validate(); err != nil {
		return store.SlotLease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowUS()
	l := m.ledger(r.Cluster)
	if l.slots == nil {
		l.slots = map[string]map[string]int64{}
	}
	held := l.slots[r.App]
	if held == nil {
		held = map[string]int64{}
		l.slots[r.App] = held
	}
	ttl := store.InstanceTTL.Microseconds()
	// Within a TTL of the fleet being heard again (or before any report) an instance not heard
	// yet is not judged dead: after an outage longer than the TTL every instance looks dead
	// until its own next report, while its requests still use its slots (lease_slots.lua).
	if !l.heard(now) {
		l.heardSince = now // a lease may come before any report after a silence
	}
	settling := l.heardSince == 0 || now-l.heardSince <= ttl
	var others int64
	for inst, n := range held {
		if inst == r.Instance {
			continue
		}
		if hb, ok := l.nodes[inst]; (!ok || now-hb > ttl) && !settling {
			delete(held, inst)
			continue
		}
		others += n
	}
	grant := max(min(r.Want, max(r.Limit-others, 0)), r.InUse)
	if grant > 0 {
		held[r.Instance] = grant
	} else {
		delete(held, r.Instance)
	}
	if len(held) == 0 {
		delete(l.slots, r.App)
	}
	return store.SlotLease{Held: grant, Others: others}, nil
}
