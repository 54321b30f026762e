package store

import (
	"errors"
	"fmt"
)

// Overrides are the admin API's fleet-wide policy overrides of one cluster as a Store keeps
// them: opaque encoded entries (the limiter encodes them, see override.go) under a version
// that changes with every change. The entries are OverrideClusterKey and OverrideAppKey(id).
type Overrides struct {
	// Version is 0 while the cluster never had an override; every SetOverride makes it larger
	// and, after a loss of the Store's data, different from any version handed out before.
	Version uint64
	Entries map[string][]byte
}

// OverrideChange is one SetOverride call: set Key to Value, or remove it (Value nil), if the
// cluster's overrides are still at IfVersion.
type OverrideChange struct {
	Key       string
	Value     []byte // nil removes the entry
	IfVersion uint64
}

// ErrVersionConflict is SetOverride's answer when the overrides changed since IfVersion: the
// caller reads them again and decides anew.
var ErrVersionConflict = errors.New("limiter: overrides changed concurrently")

// ErrTooManyOverrides is SetOverride's answer to a new entry beyond MaxOverrideEntries.
var ErrTooManyOverrides = errors.New("limiter: too many overrides in this cluster")

// OverrideClusterKey is the entry of the cluster policy's override.
const OverrideClusterKey = "cluster"

// OverrideAppKey is the entry of one app's override.
func OverrideAppKey(app string) string { return "app:" + app }

// MaxOverrideEntries bounds a cluster's overrides (the cluster's and one per app), so that the
// configuration every instance loads stays small.
const MaxOverrideEntries = 10000

// Validate reports a malformed SetOverride call: an empty key, or a version beyond 2^53 (the
// Redis store keeps it as a Lua number).
func (ch OverrideChange) Validate() error {
	switch {
	case ch.Key == "" || len(ch.Key) > 256 || ch.Key == "version":
		return fmt.Errorf("override: key %q: must be 1-256 bytes, not \"version\"", ch.Key)
	case ch.IfVersion > MaxAmount:
		return fmt.Errorf("override %q: version %d: must be <= 2^53", ch.Key, ch.IfVersion)
	}
	return nil
}
