package memstore

import (
	"context"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// AppendAudit adds entry to the cluster's audit log (see store.Store.AppendAudit).
func (m *Store) AppendAudit(ctx context.Context, cluster string, entry []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := store.ValidateAuditEntry(entry); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	log := append(m.audit[cluster], append([]byte(nil), entry...))
	if n := len(log) - store.MaxAuditEntries; n > 0 {
		log = append(log[:0:0], log[n:]...) // a fresh array: the dropped entries are freed
	}
	m.audit[cluster] = log
	return nil
}

// Audit returns the newest entries first (see store.Store.Audit).
func (m *Store) Audit(ctx context.Context, cluster string, limit int) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	log := m.audit[cluster]
	n := min(max(limit, 0), len(log))
	out := make([][]byte, n)
	for i := range out {
		out[i] = append([]byte(nil), log[len(log)-1-i]...)
	}
	return out, nil
}
