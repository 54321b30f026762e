package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	l.ovr.changes.Add(1)
	l.syncer.mu.Lock()
	defer l.syncer.mu.Unlock()
	if !l.closed.Load() {
		_ = l.report(l.clock.Now(), l.visited(), false, false)
	}
	return nil
}

// lostEmergency is the operator emergency the Store lost with its data (a restart without
// persistence, a failover to a replica that had not received it): the sync loop enforces it
// and sets it again (restoreEmergency) unless it has ended. mu guards e; the notice throttles
// the WARN of each restoration.
type lostEmergency struct {
	mu     sync.Mutex
	e      *store.Emergency // nil: nothing to restore
	notice notice
}

// remember records that the Store may have lost the operator emergency e: the next report
// decides (keep).
func (k *lostEmergency) remember(e store.Emergency) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.e = &e
}

// take returns the emergency to restore, if any, and forgets it.
func (k *lostEmergency) take() *store.Emergency {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.e
	k.e = nil
	return e
}

// keep decides, from a report's answer st and the state before it, whether the operator
// emergency in force was lost, and if so keeps enforcing it in st until it is restored. The
// overrides' version only grows while the Store keeps its data: versionLost (a lower one)
// means it lost them (reloadOverrides writes them back), and the operator emergency with them.
// The Watch may have seen the loss first (refreshOverrides remembered the emergency and wrote
// the overrides back, so the version no longer shows it).
func (k *lostEmergency) keep(versionLost bool, prev, st *store.ClusterState) {
	k.mu.Lock()
	defer k.mu.Unlock()
	lost := versionLost || k.e != nil
	switch {
	case st.Emergency:
		k.e = nil // the Store has an emergency: nothing to restore
	case lost && prev.Emergency && prev.EmergencySource == store.EmergencySourceOperator:
		k.e = &store.Emergency{Active: true, Reason: prev.EmergencyReason, Until: prev.EmergencyUntil}
		// Enforced meanwhile as before: the emptied Store's answer would lift it until the
		// next report.
		st.Emergency, st.EmergencySource, st.EmergencyReason, st.EmergencyUntil =
			true, prev.EmergencySource, prev.EmergencyReason, prev.EmergencyUntil
		st.Factors = prev.Factors
	default:
		k.e = nil // no operator emergency to restore (it ended meanwhile)
	}
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

// restoreEmergency sets again the operator emergency a Store lost with its data (the report
// that found the overrides' version gone backwards no longer had it), unless it has ended.
// Every instance that saw it does the same; setting it twice is harmless. Sync loop only.
func (l *Limiter) restoreEmergency(e store.Emergency) {
	if !e.Until.IsZero() && !e.Until.After(l.clock.Now()) {
		return
	}
	cluster := l.snap().cfg.Cluster
	err := l.callStore(context.Background(), func(ctx context.Context) error {
		return l.store.SetEmergency(ctx, cluster, e)
	})
	times, _, ok := l.lostEm.notice.due(l.clock.Now(), 0)
	if log := l.logger(); log != nil && ok {
		fields := []zap.Field{zap.String("cluster", cluster.ID), zap.String("reason", e.Reason), zap.Int64("times", times)}
		if err != nil {
			fields = append(fields, zap.Error(err))
		}
		log.Warn("rate_limit: the Store lost the operator emergency ("+lossCauses+"); setting it again", fields...)
	}
}
