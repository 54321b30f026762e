package cost

import (
	"fmt"
	"sort"
	"strings"
)

// Defaults of the cost block.
const (
	DefaultQuantum        = 65536
	DefaultBandwidth      = 1
	DefaultMax            = 1_000_000
	DefaultDefault        = 1
	DefaultStreamEstimate = 1 << 20
)

// Config is the `cost` block of the Caddyfile; JSON names are the Caddyfile's. A zero value
// means "use the default"; Bandwidth and Default are pointers because 0 is a meaningful setting
// for them (no bandwidth charge; free unknown methods), so nil is their "unset".
type Config struct {
	Operations     string           `json:"operations,omitempty"`      // "s3" (default) | "http"
	Quantum        int64            `json:"quantum,omitempty"`         // bytes per bandwidth unit, default 65536
	Bandwidth      *int64           `json:"bandwidth,omitempty"`       // tokens per quantum, default 1
	Max            int64            `json:"max,omitempty"`             // cap on one request's cost, default 1,000,000
	Default        *int64           `json:"default,omitempty"`         // base of unknown methods (OTHER), default 1
	Base           map[string]int64 `json:"base,omitempty"`            // operation name -> base override
	StreamEstimate int64            `json:"stream_estimate,omitempty"` // bytes assumed for bodies without Content-Length, default 1 MiB
	ResponseBytes  bool             `json:"response_bytes,omitempty"`  // also charge response body bytes at settlement
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Operations == "" {
		c.Operations = "s3"
	}
	if c.Quantum == 0 {
		c.Quantum = DefaultQuantum
	}
	if c.Bandwidth == nil {
		c.Bandwidth = Int(DefaultBandwidth)
	}
	if c.Max == 0 {
		c.Max = DefaultMax
	}
	if c.Default == nil {
		c.Default = Int(DefaultDefault)
	}
	if c.StreamEstimate == 0 {
		c.StreamEstimate = DefaultStreamEstimate
	}
	return c
}

// Validate reports the first invalid field, named as in the Caddyfile. Zero fields stand for
// their defaults and are valid, so a raw config from JSON can be validated as is.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case !strings.EqualFold(c.Operations, "s3") && !strings.EqualFold(c.Operations, "http"):
		return fmt.Errorf("cost.operations must be s3 or http, got %q", c.Operations)
	case c.Quantum <= 0:
		return fmt.Errorf("cost.quantum must be > 0, got %d", c.Quantum)
	case *c.Bandwidth < 0:
		return fmt.Errorf("cost.bandwidth must be >= 0, got %d", *c.Bandwidth)
	case c.Max <= 0:
		return fmt.Errorf("cost.max must be > 0, got %d", c.Max)
	case *c.Default < 0:
		return fmt.Errorf("cost.default must be >= 0, got %d", *c.Default)
	case c.StreamEstimate < 0:
		return fmt.Errorf("cost.stream_estimate must be >= 0, got %d", c.StreamEstimate)
	}
	// Sorted, so that the same config always gets the same error.
	names := make([]string, 0, len(c.Base))
	for name := range c.Base {
		names = append(names, name)
	}
	sort.Strings(names)
	seen := make(map[Operation]string, len(names))
	for _, name := range names {
		op, ok := ParseOperation(name)
		if !ok {
			return fmt.Errorf("cost.base: unknown operation %q (want one of %s)", name, strings.Join(opNames[:], ", "))
		}
		if prev, dup := seen[op]; dup {
			// Names are case-insensitive: which of the two applied would depend on map order.
			return fmt.Errorf("cost.base: %q and %q name the same operation %s", prev, name, op)
		}
		seen[op] = name
		if v := c.Base[name]; v < 0 {
			return fmt.Errorf("cost.base %s must be >= 0, got %d", name, v)
		}
	}
	return nil
}

// Int returns a pointer to n, for the optional fields of Config.
func Int(n int64) *int64 { return &n }
