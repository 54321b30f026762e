package limiter

import (
	"context"
	"encoding/json"
	"errors"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// The sync loop's side of the overrides: reading them from the Store, writing them back to a
// Store that lost them, and putting them in force.

// reloadOverrides reads the overrides from the Store and puts them in force unless the
// version read is the one already in force (ovr.mu held). A change that is refused after reading
// them (a conflict, then a value that no longer fits) still leaves this instance on what the
// fleet enforces. lost reports that the Store had lost them (their version went backwards).
func (l *Limiter) reloadOverrides(ctx context.Context) (lost bool, err error) {
	var o store.Overrides
	err = l.callStore(ctx, func(ctx context.Context) (err error) {
		o, err = l.store.Overrides(ctx, l.ovr.base.Cluster.ID)
		return err
	})
	if err != nil {
		return false, err
	}
	was, wasLoaded := l.ovr.set.version, l.ovr.loaded
	if wasLoaded && o.Version == was {
		return false, nil // in force already: decoding thousands of entries would find nothing new
	}
	read := decodeOverrides(o)
	if wasLoaded && read.version < was {
		lost = true
		// The version only grows while the Store keeps its data: it lost the overrides. They
		// are written back rather than dropped, then read again (another instance's writing
		// back, or a change made since, is what the fleet enforces).
		n, reached, err := l.writeBack(ctx, l.ovr.base.Cluster.ID, read)
		if n > 0 || err != nil { // 0: another instance writes them
			times, written, ok := l.ovr.lost.due(l.clock.Now(), int64(n))
			if log := l.logger(); log != nil && ok {
				fields := []zap.Field{
					zap.String("cluster", l.ovr.base.Cluster.ID), zap.Int64("written_back", written),
					zap.Int64("times", times),
				}
				if err != nil {
					fields = append(fields, zap.Error(err))
				}
				log.Warn("rate_limit: the Store lost the cluster's overrides ("+lossCauses+"); writing back the ones "+
					"this instance enforces", fields...)
			}
		}
		if err != nil {
			return lost, err // kept in force; the next report tries again
		}
		if err := l.callStore(ctx, func(ctx context.Context) (err error) {
			o, err = l.store.Overrides(ctx, l.ovr.base.Cluster.ID)
			return err
		}); err != nil {
			return lost, err
		}
		read = decodeOverrides(o)
		if read.version < reached || (read.version == 0 && l.ovr.set.holdsAny()) {
			// Lost again since they were written back (a Redis evicting under memory
			// pressure): applying this read would drop them. Kept in force; the next report
			// writes them back again.
			return lost, nil
		}
	}
	l.ovr.loaded = true
	if wasLoaded && read.version == was {
		return lost, nil
	}
	l.ovr.storeVersion.Store(read.version)
	return lost, l.applyOverrides(read)
}

// refreshOverrides reads the overrides again and applies them if their version changed (the
// sync loop, after a report that brought another version or a Watch notification).
func (l *Limiter) refreshOverrides() {
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	if l.closed.Load() {
		return
	}
	lost, _ := l.reloadOverrides(context.Background()) // on error the next report tries again
	if st := l.state.Load(); lost && st.Emergency && st.EmergencySource == store.EmergencySourceOperator {
		// The operator emergency may have gone with the overrides. The report notices a loss
		// by the overrides' version, which this write-back has just restored, so it could not
		// tell on its own and would lift the emergency for good. The report decides: restored
		// if the Store no longer has it.
		l.lostEm.remember(store.Emergency{Active: true, Reason: st.EmergencyReason, Until: st.EmergencyUntil})
	}
}

// outdated reports whether the overrides must be read again: never read, or the last report
// saw another version.
func (l *Limiter) outdated() bool {
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	return !l.ovr.loaded || l.ovr.storeVersion.Load() != l.ovr.set.version
}

// applyOverrides makes base merged with ov the configuration in force (ovr.mu held).
func (l *Limiter) applyOverrides(ov overrideSet) error {
	cfg, skipped := merge(l.ovr.base, ov)
	if err := l.install(cfg); err != nil {
		// Cannot happen (merge only keeps what validates); keep the loaded configuration.
		if err2 := l.install(l.ovr.base); err2 != nil {
			return err
		}
		cfg, skipped = l.ovr.base, map[string]error{"*": err}
	}
	l.ovr.inForce(ov, cfg, skipped)
	return nil
}

// inForce records ov as the overrides in force, merged into cfg with skipped left out, and
// logs the overrides that are newly left out (o.mu held).
func (o *overrides) inForce(ov overrideSet, cfg Config, skipped map[string]error) {
	log := o.base.Logger
	for k, err := range skipped {
		if o.skipped[k] == nil && log != nil {
			log.Error("rate_limit: admin override not applied: it does not fit the loaded configuration; "+
				"change or remove it through the admin API",
				zap.String("cluster", o.base.Cluster.ID), zap.String("override", k), zap.Error(err))
		}
	}
	o.set, o.merged, o.skipped = ov, cfg, skipped
}

// watchOverrides starts the Store's Watch once (the sync loop, after the first successful
// report, so that provisioning alone never connects; syncer.mu held); Close stops it.
func (l *Limiter) watchOverrides() {
	if l.syncer.unwatch != nil {
		return
	}
	l.syncer.unwatch = l.store.Watch(l.snap().cfg.Cluster.ID, func() {
		select {
		case l.reload <- struct{}{}:
		default:
		}
	})
}

// writeBack writes the overrides in force back to a Store that lost them (their version went
// backwards: a restart without persistence, a failover to a replica that had not received
// them), from the version it holds now, and returns how many entries it wrote or removed and
// the version its last write made (the stored version when none did). The Store is made to
// hold what this instance enforces: its entries are written, and the entries the Store still
// has that this instance removed since are removed (a lost DELETE would otherwise bring back
// the override it removed). Every version is unique and grows with Redis's clock, so no change
// made after the loss can be older than what this instance holds. Entries that do not decode
// (written by a newer version) are left as they are. Every instance holds them: the first to
// notice writes them back, and an instance that meets a conflict stops there, another one is
// writing them (ovr.mu held).
func (l *Limiter) writeBack(ctx context.Context, cluster string, stored overrideSet) (n int, reached uint64, err error) {
	changes := map[string][]byte{} // key → value, nil to remove
	if l.ovr.set.cluster != nil {
		raw, err := json.Marshal(l.ovr.set.cluster)
		if err != nil {
			return 0, stored.version, err
		}
		changes[store.OverrideClusterKey] = raw
	} else if stored.cluster != nil {
		changes[store.OverrideClusterKey] = nil
	}
	for id, a := range l.ovr.set.apps {
		raw, err := json.Marshal(a)
		if err != nil {
			return 0, stored.version, err
		}
		changes[store.OverrideAppKey(id)] = raw
	}
	for id := range stored.apps {
		if _, ok := l.ovr.set.apps[id]; !ok {
			changes[store.OverrideAppKey(id)] = nil
		}
	}
	reached = stored.version
	for key, raw := range changes {
		var v uint64
		err = l.callStore(ctx, func(ctx context.Context) (err error) {
			v, err = l.store.SetOverride(ctx, cluster, store.OverrideChange{Key: key, Value: raw, IfVersion: reached})
			return err
		})
		if errors.Is(err, store.ErrVersionConflict) {
			return n, reached, nil
		}
		if err != nil {
			return n, reached, err
		}
		reached = v
		n++
	}
	return n, reached, nil
}
