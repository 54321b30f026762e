package memstore

import (
	"context"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// memOverrides are one cluster's overrides in the memory store (Redis: the :cfg hash of the
// cluster, field "version" and one field per entry). They never expire.
type memOverrides struct {
	version uint64
	entries map[string][]byte
}

// memWatchers are the Watch callbacks of one cluster, by registration number.
type memWatchers map[int]func()

// Overrides returns a copy of the cluster's overrides.
func (m *Store) Overrides(ctx context.Context, cluster string) (store.Overrides, error) {
	if err := ctx.Err(); err != nil {
		return store.Overrides{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.overrides[cluster]
	if o == nil {
		return store.Overrides{Entries: map[string][]byte{}}, nil
	}
	out := store.Overrides{Version: o.version, Entries: make(map[string][]byte, len(o.entries))}
	for k, v := range o.entries {
		out.Entries[k] = append([]byte(nil), v...)
	}
	return out, nil
}

// SetOverride applies ch if the overrides are at ch.IfVersion (see Store.SetOverride).
func (m *Store) SetOverride(ctx context.Context, cluster string, ch store.OverrideChange) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := ch.Validate(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	o := m.overrides[cluster]
	if o == nil {
		o = &memOverrides{entries: map[string][]byte{}}
		m.overrides[cluster] = o
	}
	if o.version != ch.IfVersion {
		m.mu.Unlock()
		return 0, store.ErrVersionConflict
	}
	if _, ok := o.entries[ch.Key]; !ok && ch.Value != nil && len(o.entries) >= store.MaxOverrideEntries {
		m.mu.Unlock()
		return 0, store.ErrTooManyOverrides
	}
	if ch.Value == nil {
		delete(o.entries, ch.Key)
	} else {
		o.entries[ch.Key] = append([]byte(nil), ch.Value...)
	}
	o.version = max(o.version+1, uint64(max(m.nowUS(), 0)))
	v := o.version
	notify := make([]func(), 0, len(m.watchers[cluster]))
	for _, f := range m.watchers[cluster] {
		notify = append(notify, f)
	}
	m.mu.Unlock()
	for _, f := range notify {
		go f()
	}
	return v, nil
}

// Watch registers notify for the cluster's changes (see Store.Watch).
func (m *Store) Watch(cluster string, notify func()) (stop func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watchers[cluster] == nil {
		m.watchers[cluster] = memWatchers{}
	}
	m.lastWatch++
	id := m.lastWatch
	m.watchers[cluster][id] = notify
	go notify() // in place at once
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.watchers[cluster], id)
	}
}

// configVersion is the cluster's overrides version (m.mu held).
func (m *Store) configVersion(cluster string) uint64 {
	if o := m.overrides[cluster]; o != nil {
		return o.version
	}
	return 0
}
