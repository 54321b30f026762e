package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

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

// logEmergency logs the cluster entering, changing or leaving its emergency, as this instance
// learns it from a report: the automatic one (L1's usage) has no other trace in the log.
func (l *Limiter) logEmergency(prev, cur *store.ClusterState) {
	log := l.logger()
	if log == nil || (prev.Emergency == cur.Emergency && prev.EmergencySource == cur.EmergencySource) {
		return
	}
	fields := []zap.Field{
		zap.String("cluster", l.snap().cfg.Cluster.ID),
		zap.Float64("usage", cur.Usage),
		zap.Float64s("factors", cur.Factors[:]),
	}
	if !cur.Emergency {
		log.Info("rate_limit: the cluster left its emergency", append(fields, zap.String("was", prev.EmergencySource))...)
		return
	}
	fields = append(fields, zap.String("source", cur.EmergencySource), zap.String("reason", cur.EmergencyReason))
	if !cur.EmergencyUntil.IsZero() {
		// as the admin API's change line and GET show it, not as Caddy's encoder renders times
		fields = append(fields, zap.String("until", cur.EmergencyUntil.UTC().Format(time.RFC3339Nano)))
	}
	log.Warn("rate_limit: the cluster is in emergency: lower priorities are throttled or blocked", fields...)
}
