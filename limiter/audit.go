package limiter

import (
	"context"
)

// AppendAudit adds entry to the cluster's fleet-wide audit log in the Store
// (store.Store.AppendAudit).
func (l *Limiter) AppendAudit(ctx context.Context, entry []byte) error {
	if l.closed.Load() {
		return ErrClosed
	}
	cluster := l.snap().cfg.Cluster.ID
	return l.callStore(ctx, func(ctx context.Context) error { return l.store.AppendAudit(ctx, cluster, entry) })
}

// Audit returns the newest limit entries of the cluster's audit log, newest first
// (store.Store.Audit).
func (l *Limiter) Audit(ctx context.Context, limit int) (entries [][]byte, err error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	cluster := l.snap().cfg.Cluster.ID
	err = l.callStore(ctx, func(ctx context.Context) error {
		entries, err = l.store.Audit(ctx, cluster, limit)
		return err
	})
	return entries, err
}
