package limiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// overrides is the Limiter's view of the admin API's overrides (docs/admin-api.md): the
// configuration as loaded (base) and the overrides last read from the Store; the configuration
// in force is their merge. They are read at the first report and again whenever a report
// brings another version or the Store's Watch says they changed.
type overrides struct {
	ovMu    sync.Mutex // serialises Update and override changes; held across Store calls
	base    Config     // the configuration as loaded (New, Update), without overrides
	ov      overrideSet
	loaded  bool             // ov was read from the Store at least once
	skipped map[string]error // overrides left out of the configuration in force

	storeVersion atomic.Uint64 // ClusterState.ConfigVersion of the last report
	changes      atomic.Int64  // changes made through this Limiter (overrides, emergency)
	ovLost       notice        // the WARN of overrides the Store lost
}

// Source of an app's or the cluster's policy (AppSource, ClusterSource).
const (
	SourceConfig   = "caddyfile" // the loaded configuration (Caddyfile or JSON)
	SourceOverride = "override"  // an admin override of a configured app or of the cluster
	SourceAPI      = "api"       // an app that exists through its admin override only
)

// OverrideChangeResult is what an override change did, for the change log: the policies in
// force before and after (nil: the app did not exist / does not any more).
type OverrideChangeResult struct {
	Before, After any // *AppPolicy or *ClusterPolicy
	Version       uint64
}

// AppOverride returns the app's admin override in force, if any.
func (l *Limiter) AppOverride(id string) (AppOverride, bool) {
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	o, ok := l.ov.apps[id]
	if ok && l.skipped[store.OverrideAppKey(id)] != nil {
		return AppOverride{}, false
	}
	return o, ok
}

// ClusterOverride returns the cluster's admin override in force, if any.
func (l *Limiter) ClusterOverride() (ClusterOverride, bool) {
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	if l.ov.cluster == nil || l.skipped[store.OverrideClusterKey] != nil {
		return ClusterOverride{}, false
	}
	return *l.ov.cluster, true
}

// StoredAppOverride returns the app's override as the Store holds it, in force or not, and
// when this instance leaves it out of its configuration (it does not fit the loaded config),
// why. Removing it (SetAppOverride with nil) works either way.
func (l *Limiter) StoredAppOverride(id string) (o AppOverride, ok bool, notApplied error) {
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	o, ok = l.ov.apps[id]
	return o, ok, l.skipped[store.OverrideAppKey(id)]
}

// StoredClusterOverride is StoredAppOverride for the cluster's override.
func (l *Limiter) StoredClusterOverride() (o ClusterOverride, ok bool, notApplied error) {
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	if l.ov.cluster == nil {
		return ClusterOverride{}, false, nil
	}
	return *l.ov.cluster, true, l.skipped[store.OverrideClusterKey]
}

// AppSource says where the policy in force of a configured app comes from (SourceConfig,
// SourceOverride, SourceAPI), or "" for an id without a policy of its own.
func (l *Limiter) AppSource(id string) string {
	_, over := l.AppOverride(id)
	l.ovMu.Lock()
	_, configured := l.base.Apps[id]
	l.ovMu.Unlock()
	switch {
	case configured && over:
		return SourceOverride
	case configured:
		return SourceConfig
	case over:
		return SourceAPI
	}
	return ""
}

// ClusterSource says where the cluster policy in force comes from.
func (l *Limiter) ClusterSource() string {
	if _, ok := l.ClusterOverride(); ok {
		return SourceOverride
	}
	return SourceConfig
}

// ConfigChanges is how many changes were made through this Limiter (overrides set or removed,
// operator emergencies set or cleared).
func (l *Limiter) ConfigChanges() int64 { return l.changes.Load() }

// SkippedOverrides lists the Store keys of overrides that are not in force, with the reason:
// values the loaded configuration makes invalid (say, guarantees beyond a lowered capacity).
func (l *Limiter) SkippedOverrides() map[string]error {
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	out := make(map[string]error, len(l.skipped))
	for k, v := range l.skipped {
		out[k] = v
	}
	return out
}

// SetAppOverride sets (o non-nil) or removes (o nil) the fleet-wide override of app id. The
// result must be a valid configuration for this instance: otherwise the error is a
// FieldErrors naming each bad field, and nothing changes. The change is stored (the other
// instances apply it when the Store notifies them, or at their next report) and applied here
// before SetAppOverride returns.
func (l *Limiter) SetAppOverride(ctx context.Context, id string, o *AppOverride) (OverrideChangeResult, error) {
	if !ValidAppID(id) {
		return OverrideChangeResult{}, store.FieldErrors{{Field: "id", Problem: fmt.Sprintf(
			"invalid app id %q (1-128 characters of [A-Za-z0-9._:-])", id)}}
	}
	key := store.OverrideAppKey(id)
	return l.change(ctx, key, o, func(cur overrideSet) overrideSet { return cur.withApp(id, o) },
		func(cfg Config) any {
			if p, ok := cfg.Apps[id]; ok {
				return &p
			}
			return nil
		})
}

// SetClusterOverride sets (o non-nil) or removes (o nil) the fleet-wide override of the
// cluster's L1 policy, like SetAppOverride.
func (l *Limiter) SetClusterOverride(ctx context.Context, o *ClusterOverride) (OverrideChangeResult, error) {
	return l.change(ctx, store.OverrideClusterKey, o, func(cur overrideSet) overrideSet { return cur.withCluster(o) },
		func(cfg Config) any { c := cfg.Cluster; return &c })
}

// maxConflicts bounds the retries of a change that lost a race with another instance's.
const maxConflicts = 8

// change validates, stores and applies one override change. value is the override (a typed
// nil pointer removes it); next builds the new set; policy extracts the policy shown in the
// result.
func (l *Limiter) change(ctx context.Context, key string, value any, next func(overrideSet) overrideSet,
	policy func(Config) any) (OverrideChangeResult, error) {
	if l.closed.Load() {
		return OverrideChangeResult{}, ErrClosed
	}
	var raw []byte
	if !isNilPointer(value) {
		b, err := json.Marshal(value)
		if err != nil {
			return OverrideChangeResult{}, err
		}
		raw = b
	}
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	for attempt := 0; ; attempt++ {
		if !l.loaded {
			if _, err := l.reloadOverrides(ctx); err != nil {
				return OverrideChangeResult{}, err
			}
		}
		before, _ := merge(l.base, l.ov)
		want := next(l.ov)
		after, skipped := merge(l.base, want)
		if err := skipped[key]; err != nil {
			return OverrideChangeResult{}, err
		}
		if err := l.newlySkipped(skipped, key); err != nil {
			return OverrideChangeResult{}, err
		}
		if _, err := after.withDefaults(); err != nil {
			return OverrideChangeResult{}, err
		}
		version, err := l.storeCall(ctx, func(ctx context.Context) (uint64, error) {
			return l.store.SetOverride(ctx, l.base.Cluster.ID, store.OverrideChange{Key: key, Value: raw, IfVersion: l.ov.version})
		})
		if errors.Is(err, store.ErrVersionConflict) && attempt < maxConflicts {
			l.loaded = false // another instance changed them: read them and decide again
			continue
		}
		if err != nil {
			return OverrideChangeResult{}, err
		}
		want.version = version
		l.storeVersion.Store(version)
		if err := l.applyOverrides(want); err != nil {
			return OverrideChangeResult{}, err
		}
		l.changes.Add(1)
		return OverrideChangeResult{Before: policy(before), After: policy(after), Version: version}, nil
	}
}

// newlySkipped reports an override in force that the change would push out of the
// configuration (the guarantees of another app no longer fitting), as a FieldErrors on the
// changed override's fields (ovMu held).
func (l *Limiter) newlySkipped(skipped map[string]error, key string) error {
	var pushed []string
	for k := range skipped {
		if k != key && l.skipped[k] == nil {
			pushed = append(pushed, k)
		}
	}
	if len(pushed) == 0 {
		return nil
	}
	sort.Strings(pushed)
	field := "guaranteed"
	if key == store.OverrideClusterKey {
		field = "capacity"
	}
	return store.FieldErrors{{Field: field, Problem: fmt.Sprintf("the change would leave the overrides %v out "+
		"of the configuration (%v)", pushed, skipped[pushed[0]])}}
}

// storeCall runs a Store call bounded by ctx and the background timeout, turning a panic into
// an error.
func (l *Limiter) storeCall(ctx context.Context, f func(ctx context.Context) (uint64, error)) (v uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.bgTimeout())
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("limiter: store panicked: %v", r)
		}
	}()
	return f(ctx)
}

// reloadOverrides reads the overrides from the Store and puts them in force unless the
// version read is the one already in force (ovMu held). A change that is refused after reading
// them (a conflict, then a value that no longer fits) still leaves this instance on what the
// fleet enforces. lost reports that the Store had lost them (their version went backwards).
func (l *Limiter) reloadOverrides(ctx context.Context) (lost bool, err error) {
	var o store.Overrides
	_, err = l.storeCall(ctx, func(ctx context.Context) (uint64, error) {
		var err error
		o, err = l.store.Overrides(ctx, l.base.Cluster.ID)
		return 0, err
	})
	if err != nil {
		return false, err
	}
	read, was, wasLoaded := decodeOverrides(o), l.ov.version, l.loaded
	if wasLoaded && read.version < was {
		lost = true
		// The version only grows while the Store keeps its data: it lost the overrides. They
		// are written back rather than dropped, then read again (another instance's writing
		// back, or a change made since, is what the fleet enforces).
		n, reached, err := l.writeBack(ctx, l.base.Cluster.ID, read.version)
		if n > 0 || err != nil { // 0: another instance writes them
			times, written, ok := l.ovLost.due(l.clock.Now(), int64(n))
			if log := l.logger(); log != nil && ok {
				fields := []zap.Field{zap.String("cluster", l.base.Cluster.ID), zap.Int64("written_back", written),
					zap.Int64("times", times)}
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
		if _, err := l.storeCall(ctx, func(ctx context.Context) (uint64, error) {
			var err error
			o, err = l.store.Overrides(ctx, l.base.Cluster.ID)
			return 0, err
		}); err != nil {
			return lost, err
		}
		read = decodeOverrides(o)
		if read.version < reached || (read.version == 0 && l.ov.holdsAny()) {
			// Lost again since they were written back (a Redis evicting under memory
			// pressure): applying this read would drop them. Kept in force; the next report
			// writes them back again.
			return lost, nil
		}
	}
	l.loaded = true
	if wasLoaded && read.version == was {
		return lost, nil
	}
	l.storeVersion.Store(read.version)
	return lost, l.applyOverrides(read)
}

// refreshOverrides reads the overrides again and applies them if their version changed (the
// sync loop, after a report that brought another version or a Watch notification).
func (l *Limiter) refreshOverrides() {
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	if l.closed.Load() {
		return
	}
	lost, _ := l.reloadOverrides(context.Background()) // on error the next report tries again
	if st := l.state.Load(); lost && st.Emergency && st.EmergencySource == store.EmergencySourceOperator {
		// The operator emergency may have gone with the overrides. The report notices a loss
		// by the overrides' version, which this write-back has just restored: without this the
		// next report lifted the emergency for good (a Redis restart seen first by the Watch).
		// The report decides: restored if the Store no longer has it.
		l.lostEm.remember(store.Emergency{Active: true, Reason: st.EmergencyReason, Until: st.EmergencyUntil})
	}
}

// outdated reports whether the overrides must be read again: never read, or the last report
// saw another version.
func (l *Limiter) outdated() bool {
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	return !l.loaded || l.storeVersion.Load() != l.ov.version
}

// applyOverrides makes base merged with ov the configuration in force, and logs the overrides
// that are newly left out (ovMu held).
func (l *Limiter) applyOverrides(ov overrideSet) error {
	cfg, skipped := merge(l.base, ov)
	if err := l.install(cfg); err != nil {
		// Cannot happen (merge only keeps what validates); keep the loaded configuration.
		if err2 := l.install(l.base); err2 != nil {
			return err
		}
		skipped = map[string]error{"*": err}
	}
	log := l.base.Logger
	for k, err := range skipped {
		if l.skipped[k] == nil && log != nil {
			log.Error("rate_limit: admin override not applied: it does not fit the loaded configuration; "+
				"change or remove it through the admin API",
				zap.String("cluster", l.base.Cluster.ID), zap.String("override", k), zap.Error(err))
		}
	}
	l.ov, l.skipped = ov, skipped
	return nil
}

// watchOverrides starts the Store's Watch once (the sync loop, after the first successful
// report, so that provisioning alone never connects); Close stops it.
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

func isNilPointer(v any) bool {
	switch p := v.(type) {
	case *AppOverride:
		return p == nil
	case *ClusterOverride:
		return p == nil
	}
	return v == nil
}

// writeBack writes the overrides in force back to a Store that lost them (their version went
// backwards: a restart without persistence, a failover to a replica that had not received
// them), from the version it holds now, and returns how many it wrote and the version its
// last write made (version itself when none did). Every instance holds them: the first to
// notice writes them back, and an instance that meets a conflict stops there, another one is
// writing them (ovMu held).
func (l *Limiter) writeBack(ctx context.Context, cluster string, version uint64) (n int, reached uint64, err error) {
	entries := map[string]any{}
	if l.ov.cluster != nil {
		entries[store.OverrideClusterKey] = l.ov.cluster
	}
	for id, a := range l.ov.apps {
		entries[store.OverrideAppKey(id)] = a
	}
	reached = version
	for key, value := range entries {
		raw, err := json.Marshal(value)
		if err != nil {
			return n, reached, err
		}
		v, err := l.storeCall(ctx, func(ctx context.Context) (uint64, error) {
			return l.store.SetOverride(ctx, cluster, store.OverrideChange{Key: key, Value: raw, IfVersion: reached})
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
