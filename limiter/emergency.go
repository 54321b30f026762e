package limiter

import (
	"context"
	"errors"
	"fmt"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// ErrClosed is returned by calls on a closed Limiter that need its Store.
var ErrClosed = errors.New("limiter: closed")

// SetEmergency sets (e.Active) or clears the operator emergency of the Limiter's cluster in
// the Store, fleet-wide (Store.SetEmergency with the cluster policy in force), then reports at
// once so that this instance applies it immediately; the other instances learn it at their
// next report (one sync interval). Clearing it leaves L1's automatic emergency alone. A
// failure of that report is not an error: the change is stored, and the next report brings it.
func (l *Limiter) SetEmergency(ctx context.Context, e store.Emergency) error {
	if l.closed.Load() {
		return ErrClosed
	}
	cluster := l.snap().cfg.Cluster
	if err := store.ValidateEmergency(cluster, e); err != nil {
		return err
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("limiter: store panicked: %v", r)
			}
		}()
		return l.store.SetEmergency(ctx, cluster, e)
	}()
	if err != nil {
		return err
	}
	l.changes.Add(1)
	l.tickMu.Lock()
	defer l.tickMu.Unlock()
	if !l.closed.Load() {
		_ = l.report(l.clock.Now(), l.visited(), false)
	}
	return nil
}
