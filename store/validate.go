package store

import (
	"fmt"
	"math"
	"strings"
)

// FieldError is one invalid field of a policy, named as in the Caddyfile and the JSON config.
type FieldError struct {
	Field   string // "burst", "emergency_ratios[2]", …
	Problem string // "must be >= guaranteed (10), got 5"
}

func (e FieldError) Error() string { return e.Field + " " + e.Problem }

// FieldErrors lists every invalid field of one policy, in field order. The Caddyfile, the JSON
// config and the admin API report the same list for the same values.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// Prefixed returns the errors with prefix added to every field name ("apps[\"a\"]." + "burst").
func (es FieldErrors) Prefixed(prefix string) FieldErrors {
	out := make(FieldErrors, len(es))
	for i, e := range es {
		out[i] = FieldError{Field: prefix + e.Field, Problem: e.Problem}
	}
	return out
}

func (es *FieldErrors) add(field, format string, args ...any) {
	*es = append(*es, FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

// Validate lists the invalid fields of an app policy whose defaults are applied (Burst set).
func (p AppPolicy) Validate() FieldErrors {
	var es FieldErrors
	if !finite(p.Guaranteed) || p.Guaranteed <= 0 || p.Guaranteed > MaxAmount {
		es.add("guaranteed", "must be > 0 and <= 2^53, got %v", p.Guaranteed)
	}
	switch {
	case !finite(p.Burst) || p.Burst > MaxAmount:
		es.add("burst", "must be a number <= 2^53, got %v", p.Burst)
	case p.Burst < p.Guaranteed:
		es.add("burst", "must be >= guaranteed (%v), got %v", p.Guaranteed, p.Burst)
	case p.Burst < 1:
		es.add("burst", "must be >= 1 (one request of cost 1), got %v", p.Burst)
	}
	if p.Priority < 0 || p.Priority > MaxPriority {
		es.add("priority", "must be 0-%d, got %d", MaxPriority, p.Priority)
	}
	if !finite(p.MaxBorrow) || p.MaxBorrow < 0 || p.MaxBorrow > MaxAmount {
		es.add("max_borrow", "must be >= 0 (and <= 2^53), got %v", p.MaxBorrow)
	}
	if p.Max != 0 && (!finite(p.Max) || p.Max < p.Guaranteed || p.Max > MaxAmount) {
		es.add("max", "must be >= guaranteed (%v) and <= 2^53 (leave it out for guaranteed), got %v", p.Guaranteed, p.Max)
	}
	if p.MaxConnections < 0 || p.MaxConnections > MaxAmount {
		// 2^53: a fleet-wide limit is counted in the Store's doubles (Redis Lua)
		es.add("max_connections", "must be >= 0 (and <= 2^53), got %d", p.MaxConnections)
	}
	if p.Warmup < 0 {
		es.add("warmup", "must be >= 0, got %v", p.Warmup)
	}
	return es
}

// Validate lists the invalid fields of a cluster policy (the id is checked by its owner).
func (c ClusterPolicy) Validate() FieldErrors {
	var es FieldErrors
	if !finite(c.Capacity) || c.Capacity < 0 || c.Capacity > MaxAmount {
		es.add("capacity", "must be >= 0 (0 = no cluster limit) and <= 2^53, got %v", c.Capacity)
	}
	switch {
	case !inUnit(c.ReservedRatio):
		es.add("reserved_ratio", "must be in [0,1), got %v", c.ReservedRatio)
	case c.ReservedRatio == 1:
		es.add("reserved_ratio", "must be < 1 (1 would leave no capacity for guarantees)")
	}
	switch {
	case !inUnit(c.EmergencyThreshold):
		es.add("emergency_threshold", "must be in (0,1], got %v", c.EmergencyThreshold)
	case c.EmergencyThreshold == 0:
		es.add("emergency_threshold", "must be > 0")
	}
	for i, r := range c.EmergencyRatios {
		if !inUnit(r) {
			es.add(fmt.Sprintf("emergency_ratios[%d]", i), "must be in [0,1], got %v", r)
		}
	}
	c.validateAdaptive(&es)
	return es
}

func inUnit(f float64) bool { return !math.IsNaN(f) && f >= 0 && f <= 1 }
