package limiter

import (
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// AppOverride is a fleet-wide override of one app's policy, set through the admin API and kept
// in the Store. Only the fields that are set replace the configured ones; an app without a
// configured policy takes the `app *` template (Config.Default) for the others.
type AppOverride struct {
	Guaranteed     *float64       `json:"guaranteed,omitempty"`
	Burst          *float64       `json:"burst,omitempty"`
	Priority       *int           `json:"priority,omitempty"`
	MaxBorrow      *float64       `json:"max_borrow,omitempty"`
	MaxConnections *int64         `json:"max_connections,omitempty"`
	Warmup         *time.Duration `json:"warmup,omitempty"` // nanoseconds in the Store
	Enabled        *bool          `json:"enabled,omitempty"`
}

// Apply returns p with the override's fields. An override of guaranteed without a burst keeps
// the configured burst, raised to the new guaranteed when below it (a burst left out of the
// config is the guaranteed rate, and the operator never chose it).
func (o AppOverride) Apply(p store.AppPolicy) store.AppPolicy {
	set(&p.Guaranteed, o.Guaranteed)
	set(&p.Burst, o.Burst)
	if o.Burst == nil && p.Guaranteed > p.Burst {
		p.Burst = p.Guaranteed
	}
	set(&p.Priority, o.Priority)
	set(&p.MaxBorrow, o.MaxBorrow)
	set(&p.MaxConnections, o.MaxConnections)
	set(&p.Warmup, o.Warmup)
	if o.Enabled != nil {
		p.Disabled = !*o.Enabled
	}
	return p
}

// Fields names the fields the override sets, in the order of the Caddyfile.
func (o AppOverride) Fields() []string {
	return present(
		"guaranteed", o.Guaranteed != nil, "burst", o.Burst != nil, "priority", o.Priority != nil,
		"max_borrow", o.MaxBorrow != nil, "max_connections", o.MaxConnections != nil, "warmup", o.Warmup != nil,
		"enabled", o.Enabled != nil)
}

// ClusterOverride is a fleet-wide override of the cluster's L1 policy.
type ClusterOverride struct {
	Capacity           *float64                        `json:"capacity,omitempty"`
	ReservedRatio      *float64                        `json:"reserved_ratio,omitempty"`
	EmergencyThreshold *float64                        `json:"emergency_threshold,omitempty"`
	EmergencyRatios    *[store.MaxPriority + 1]float64 `json:"emergency_ratios,omitempty"`
}

// Apply returns c with the override's fields. A capacity pins the capacity: a learned one
// (adaptive) is paused while the override lasts, and resumes from the pinned figure.
func (o ClusterOverride) Apply(c store.ClusterPolicy) store.ClusterPolicy {
	if o.Capacity != nil {
		c.Adaptive = store.AdaptivePolicy{}
	}
	set(&c.Capacity, o.Capacity)
	set(&c.ReservedRatio, o.ReservedRatio)
	set(&c.EmergencyThreshold, o.EmergencyThreshold)
	set(&c.EmergencyRatios, o.EmergencyRatios)
	return c
}

// Fields names the fields the override sets.
func (o ClusterOverride) Fields() []string {
	return present("capacity", o.Capacity != nil, "reserved_ratio", o.ReservedRatio != nil,
		"emergency_threshold", o.EmergencyThreshold != nil, "emergency_ratios", o.EmergencyRatios != nil)
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// present returns the names (even arguments) whose flag (odd arguments) is true.
func present(pairs ...any) []string {
	var out []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1].(bool) {
			out = append(out, pairs[i].(string))
		}
	}
	return out
}

// overrideSet is a cluster's overrides, decoded.
type overrideSet struct {
	version uint64
	cluster *ClusterOverride
	apps    map[string]AppOverride
	bad     map[string]error // entries that do not decode (written by a newer version?)
}

// holdsAny reports whether the set has an override in force.
func (o overrideSet) holdsAny() bool { return o.cluster != nil || len(o.apps) > 0 }

// decodeOverrides decodes a Store's entries; entries that do not decode are kept in bad.
func decodeOverrides(o store.Overrides) overrideSet {
	s := overrideSet{version: o.Version, apps: map[string]AppOverride{}}
	for key, raw := range o.Entries {
		var err error
		switch {
		case key == store.OverrideClusterKey:
			var c ClusterOverride
			if err = strictJSON(raw, &c); err == nil {
				s.cluster = &c
			}
		case strings.HasPrefix(key, "app:") && ValidAppID(strings.TrimPrefix(key, "app:")):
			var a AppOverride
			if err = strictJSON(raw, &a); err == nil {
				s.apps[strings.TrimPrefix(key, "app:")] = a
			}
		default:
			err = fmt.Errorf("unknown entry")
		}
		if err != nil {
			if s.bad == nil {
				s.bad = map[string]error{}
			}
			s.bad[key] = err
		}
	}
	return s
}

func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// with returns a copy of s with one app's override set (o non-nil) or removed.
func (s overrideSet) withApp(id string, o *AppOverride) overrideSet {
	s.apps = maps.Clone(s.apps)
	if o == nil {
		delete(s.apps, id)
	} else {
		s.apps[id] = *o
	}
	return s
}

// withCluster returns a copy of s with the cluster's override set (o non-nil) or removed.
func (s overrideSet) withCluster(o *ClusterOverride) overrideSet {
	s.cluster = o
	return s
}

// merge applies the overrides to base, the configuration as loaded (Caddyfile or JSON): the
// cluster's first, then the apps' in id order. An override that would make the configuration
// invalid (a bad value, or guarantees beyond the capacity) is left out and reported in skipped
// by its Store key; the others apply. base must be valid.
func merge(base Config, ov overrideSet) (cfg Config, skipped map[string]error) {
	skip := func(key string, err error) {
		if skipped == nil {
			skipped = map[string]error{}
		}
		skipped[key] = err
	}
	cfg = base
	if cfg.Cluster.EmergencyThreshold == 0 {
		cfg.Cluster.EmergencyThreshold = DefaultEmergencyThreshold
	}
	cfg.Apps = make(map[string]store.AppPolicy, len(base.Apps)+len(ov.apps))
	maps.Copy(cfg.Apps, base.Apps)
	for key, err := range ov.bad {
		skip(key, err)
	}
	if ov.cluster != nil {
		next := cfg
		next.Cluster = ov.cluster.Apply(cfg.Cluster)
		if es := append(next.Cluster.Validate(), next.Admission()...); len(es) > 0 {
			skip(store.OverrideClusterKey, es)
		} else {
			cfg = next
		}
	}
	sum := 0.0
	for _, p := range cfg.Apps {
		sum += p.Guaranteed
	}
	limit := (1 - cfg.Cluster.ReservedRatio) * cfg.Cluster.AdmissionCapacity()
	ids := make([]string, 0, len(ov.apps))
	for id := range ov.apps {
		ids = append(ids, id)
	}
	if cfg.Cluster.AdmissionCapacity() > 0 {
		sort.Strings(ids) // which override is left out when the guarantees do not fit
	}
	for _, id := range ids {
		old, configured := cfg.Apps[id]
		if !configured {
			old = base.Default
		}
		p := ov.apps[id].Apply(old)
		if es := p.Validate(); len(es) > 0 {
			skip(store.OverrideAppKey(id), es)
			continue
		}
		next := sum + p.Guaranteed
		if configured {
			next -= old.Guaranteed
		}
		if cfg.Cluster.AdmissionCapacity() > 0 && next > limit {
			skip(store.OverrideAppKey(id), store.FieldErrors{{Field: "guaranteed", Problem: fmt.Sprintf(
				"is too high: the cluster's sum of guaranteed would be %v, over (1 - reserved_ratio) × capacity = %v", next, limit)}})
			continue
		}
		cfg.Apps[id] = p
		sum = next
	}
	return cfg, skipped
}
