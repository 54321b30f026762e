package connlimit

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"zero is all defaults", Config{}, ""},
		{"explicit", Config{App: 1, Cluster: 1, IdleTimeout: time.Second, SweepInterval: 100 * time.Millisecond}, ""},
		{"app", Config{App: -1}, "connections.app must be > 0"},
		{"cluster", Config{Cluster: -5}, "connections.cluster must be > 0"},
		{"app above 2^53", Config{App: 1<<53 + 1}, "connections.app must be > 0 (and <= 2^53)"},
		{"idle_timeout", Config{IdleTimeout: -time.Second}, "connections.idle_timeout must be >= 1s, got -1s"},
		{"idle_timeout too short", Config{IdleTimeout: time.Millisecond}, "connections.idle_timeout must be >= 1s, got 1ms"},
		{"sweep_interval", Config{SweepInterval: -time.Second}, "connections.sweep_interval must be >= 100ms, got -1s"},
		{"sweep_interval too short", Config{SweepInterval: time.Millisecond}, "connections.sweep_interval must be >= 100ms, got 1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	want := Config{App: 1000, Cluster: 5000, IdleTimeout: 300 * time.Second, SweepInterval: 30 * time.Second, MaxApps: MaxApps}
	if got != want {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
	if got := sanitize(Config{App: -3, Cluster: 7}); got.App != 1000 || got.Cluster != 7 {
		t.Fatalf("sanitize = %+v, want App 1000 (default for a negative), Cluster 7", got)
	}
}
