package connlimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Defaults of the connections block.
const (
	DefaultApp           = 1000
	DefaultCluster       = 5000
	DefaultIdleTimeout   = 300 * time.Second
	DefaultSweepInterval = 30 * time.Second
)

// Config is the `connections` block of the Caddyfile; JSON names are the Caddyfile's. A zero
// field means "use the default".
type Config struct {
	App           int64         `json:"app,omitempty"`            // in-flight limit of an app without max_connections
	Cluster       int64         `json:"cluster,omitempty"`        // in-flight limit of the whole cluster
	IdleTimeout   time.Duration `json:"idle_timeout,omitempty"`   // a ticket idle this long is swept as leaked
	SweepInterval time.Duration `json:"sweep_interval,omitempty"` // how often the leak sweep runs
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
	return c
}

// Validate reports the first invalid field, named as in the Caddyfile. Zero fields stand for
// their defaults and are valid, so a raw config can be validated as is.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.App <= 0:
		return fmt.Errorf("connections.app must be > 0, got %d", c.App)
	case c.Cluster <= 0:
		return fmt.Errorf("connections.cluster must be > 0, got %d", c.Cluster)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("connections.idle_timeout must be > 0, got %s", c.IdleTimeout)
	case c.SweepInterval <= 0:
		return fmt.Errorf("connections.sweep_interval must be > 0, got %s", c.SweepInterval)
	}
	return nil
}

// UnmarshalJSON accepts the durations either as nanoseconds (how time.Duration marshals) or as
// duration strings like "5m", as Caddy's own JSON does.
func (c *Config) UnmarshalJSON(b []byte) error {
	var raw struct {
		App           int64           `json:"app"`
		Cluster       int64           `json:"cluster"`
		IdleTimeout   json.RawMessage `json:"idle_timeout"`
		SweepInterval json.RawMessage `json:"sweep_interval"`
	}
	// Strict like Caddy's own decoding of module config: a misspelt field is an error.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("connections: %w", err)
	}
	idle, err := parseDuration("idle_timeout", raw.IdleTimeout)
	if err != nil {
		return err
	}
	sweep, err := parseDuration("sweep_interval", raw.SweepInterval)
	if err != nil {
		return err
	}
	*c = Config{App: raw.App, Cluster: raw.Cluster, IdleTimeout: idle, SweepInterval: sweep}
	return nil
}

// parseDuration decodes a JSON number of nanoseconds or a duration string; absent is 0.
func parseDuration(field string, b json.RawMessage) (time.Duration, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return 0, nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return 0, fmt.Errorf("connections.%s: %w", field, err)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("connections.%s: %w", field, err)
		}
		return d, nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return 0, fmt.Errorf("connections.%s: must be a duration string or nanoseconds: %w", field, err)
	}
	return time.Duration(n), nil
}
