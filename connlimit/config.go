package connlimit

import (
	"fmt"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Defaults of the connections block.
const (
	DefaultApp           = 1000
	DefaultCluster       = 5000
	DefaultIdleTimeout   = 300 * time.Second
	DefaultSweepInterval = 30 * time.Second
)

// Config holds the in-flight limits and the leak sweep's timing. A zero field means "use the
// default".
type Config struct {
	App           int64         // in-flight limit of an app without its own limit
	Cluster       int64         // in-flight limit of the whole cluster
	IdleTimeout   time.Duration // a ticket idle this long is swept as leaked
	SweepInterval time.Duration // how often the leak sweep runs
	MaxApps       int           // per-app counters at most (default MaxApps); more apps count under "*"
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.App == 0 {
		c.App = DefaultApp
	}
	if c.Cluster == 0 {
		c.Cluster = DefaultCluster
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.MaxApps <= 0 {
		c.MaxApps = MaxApps
	}
	return c
}

// Validate reports the first invalid field, named as in the Caddyfile. Zero fields stand for
// their defaults and are valid, so a raw config can be validated as is.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.App <= 0 || c.App > store.MaxAmount:
		return fmt.Errorf("connections.app must be > 0 (and <= 2^53), got %d", c.App)
	case c.Cluster <= 0 || c.Cluster > store.MaxAmount:
		return fmt.Errorf("connections.cluster must be > 0 (and <= 2^53), got %d", c.Cluster)
	case c.IdleTimeout < MinIdleTimeout:
		return fmt.Errorf("connections.idle_timeout must be >= %s, got %s", MinIdleTimeout, c.IdleTimeout)
	case c.SweepInterval < MinSweepInterval:
		return fmt.Errorf("connections.sweep_interval must be >= %s, got %s", MinSweepInterval, c.SweepInterval)
	}
	return nil
}

// The shortest idle_timeout and sweep_interval an operator may set: a live request reads or
// writes within a second, and a sweep visits every slot, so sweeping more often only burns CPU.
const (
	MinIdleTimeout   = time.Second
	MinSweepInterval = 100 * time.Millisecond
)
