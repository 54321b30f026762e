package limiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// overrides is the Limiter's view of the admin API's overrides (docs/admin-api.md): the
// configuration as loaded (base) and the overrides last read from the Store; the configuration
// in force is their merge. They are read at the first report and again whenever a report
// brings another version or the Store's Watch says they changed.
//
// mu serialises Update and override changes and guards base, set, loaded and skipped; it is
// held across the Store calls that read and write the overrides.
type overrides struct {
	mu      sync.Mutex
	base    Config           // the configuration as loaded (New, Update), without overrides
	set     overrideSet      // the overrides last read from (or written to) the Store
	loaded  bool             // set was read from the Store at least once
	skipped map[string]error // overrides left out of the configuration in force
	merged  Config           // base merged with set: the configuration in force, before defaults

	storeVersion atomic.Uint64 // ClusterState.ConfigVersion of the last report
	changes      atomic.Int64  // changes made through this Limiter (overrides, emergency)
	lost         notice        // the WARN of overrides the Store lost
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
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	o, ok := l.ovr.set.apps[id]
	if ok && l.ovr.skipped[store.OverrideAppKey(id)] != nil {
		return AppOverride{}, false
	}
	return o, ok
}

// ClusterOverride returns the cluster's admin override in force, if any.
func (l *Limiter) ClusterOverride() (ClusterOverride, bool) {
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	if l.ovr.set.cluster == nil || l.ovr.skipped[store.OverrideClusterKey] != nil {
		return ClusterOverride{}, false
	}
	return *l.ovr.set.cluster, true
}

// StoredAppOverride returns the app's override as the Store holds it, in force or not, and
// when this instance leaves it out of its configuration (it does not fit the loaded config),
// why. Removing it (SetAppOverride with nil) works either way.
func (l *Limiter) StoredAppOverride(id string) (o AppOverride, ok bool, notApplied error) {
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	o, ok = l.ovr.set.apps[id]
	return o, ok, l.ovr.skipped[store.OverrideAppKey(id)]
}

// StoredClusterOverride is StoredAppOverride for the cluster's override.
func (l *Limiter) StoredClusterOverride() (o ClusterOverride, ok bool, notApplied error) {
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	if l.ovr.set.cluster == nil {
		return ClusterOverride{}, false, nil
	}
	return *l.ovr.set.cluster, true, l.ovr.skipped[store.OverrideClusterKey]
}

// AppSource says where the policy in force of a configured app comes from (SourceConfig,
// SourceOverride, SourceAPI), or "" for an id without a policy of its own.
func (l *Limiter) AppSource(id string) string {
	_, over := l.AppOverride(id)
	l.ovr.mu.Lock()
	_, configured := l.ovr.base.Apps[id]
	l.ovr.mu.Unlock()
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
func (l *Limiter) ConfigChanges() int64 { return l.ovr.changes.Load() }

// SkippedOverrides lists the Store keys of overrides that are not in force, with the reason:
// values the loaded configuration makes invalid (say, guarantees beyond a lowered capacity).
func (l *Limiter) SkippedOverrides() map[string]error {
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	out := make(map[string]error, len(l.ovr.skipped))
	for k, v := range l.ovr.skipped {
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
	policy func(Config) any,
) (OverrideChangeResult, error) {
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
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if !l.ovr.loaded {
			if _, err := l.reloadOverrides(ctx); err != nil {
				return OverrideChangeResult{}, err
			}
		}
		before := l.ovr.merged
		want := next(l.ovr.set)
		after, skipped := merge(l.ovr.base, want)
		if err := skipped[key]; err != nil {
			return OverrideChangeResult{}, err
		}
		if err := l.ovr.newlySkipped(skipped, key); err != nil {
			return OverrideChangeResult{}, err
		}
		prepared, err := l.cat.prepare(after)
		if err != nil {
			return OverrideChangeResult{}, err
		}
		var version uint64
		err = l.callStore(ctx, func(ctx context.Context) (err error) {
			version, err = l.store.SetOverride(ctx, l.ovr.base.Cluster.ID, store.OverrideChange{Key: key, Value: raw, IfVersion: l.ovr.set.version})
			return err
		})
		if errors.Is(err, store.ErrVersionConflict) && attempt < maxConflicts {
			l.ovr.loaded = false // another instance changed them: read them and decide again
			continue
		}
		if err != nil {
			return OverrideChangeResult{}, err
		}
		want.version = version
		l.ovr.storeVersion.Store(version)
		l.cat.put(prepared, l.clock.Now())
		l.ovr.inForce(want, after, skipped)
		l.ovr.changes.Add(1)
		return OverrideChangeResult{Before: policy(before), After: policy(after), Version: version}, nil
	}
}

// newlySkipped reports an override in force that the change would push out of the
// configuration (the guarantees of another app no longer fitting), as a FieldErrors on the
// changed override's fields (o.mu held).
func (o *overrides) newlySkipped(skipped map[string]error, key string) error {
	var pushed []string
	for k := range skipped {
		if k != key && o.skipped[k] == nil {
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

func isNilPointer(v any) bool {
	switch p := v.(type) {
	case *AppOverride:
		return p == nil
	case *ClusterOverride:
		return p == nil
	}
	return v == nil
}
