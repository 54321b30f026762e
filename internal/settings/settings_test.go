package settings

import (
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// TestDefaults: empty settings are a cluster "default" with the built-in template, the
// default ratios, and the limiter's own defaults for the local knobs.
func TestDefaults(t *testing.T) {
	cfg, err := Cluster{}.Limiter()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Cluster
	if c.ID != DefaultCluster || c.ReservedRatio != DefaultReservedRatio || c.EmergencyThreshold != DefaultEmergencyThreshold || c.EmergencyRatios != DefaultEmergencyRatios() {
		t.Errorf("cluster policy %+v", c)
	}
	if d := cfg.Default; d.Guaranteed != DefaultAppGuaranteed || d.Burst != DefaultAppBurst || d.Priority != DefaultAppPriority {
		t.Errorf("template %+v", d)
	}
	if cfg.UnknownApp != limiter.UnknownShared || cfg.OnStoreFailure != limiter.FailLocal || cfg.SyncInterval != 0 {
		t.Errorf("modes and knobs %+v", cfg)
	}
	cfg, err = Cluster{Apps: map[string]*App{"half": {Guaranteed: 0.5}, "ten": {Guaranteed: 10}}}.Limiter()
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Apps["half"].Burst; b != 1 {
		t.Errorf("burst of guaranteed 0.5 = %v, want 1 (one request of cost 1 fits)", b)
	}
	if b := cfg.Apps["ten"].Burst; b != 10 {
		t.Errorf("burst of guaranteed 10 = %v, want 10", b)
	}
}

// TestErrorsNameTheField: each invalid setting is an error naming its field as the
// Caddyfile does.
func TestErrorsNameTheField(t *testing.T) {
	zero := 0.0
	for _, tc := range []struct {
		c    Cluster
		want string
	}{
		{Cluster{ID: "a b"}, `cluster: invalid id "a b"`},
		{Cluster{EmergencyThreshold: &zero}, `emergency_threshold`},
		{Cluster{EmergencyRatios: []float64{1, 1, 1, 2}}, `emergency_ratios[3]`},
		{Cluster{UnknownApp: "x"}, `unknown_app must be shared, isolated or reject, got "x"`},
		{Cluster{OnRedisFailure: "x"}, `on_redis_failure must be local, open or closed, got "x"`},
		{Cluster{Apps: map[string]*App{"a": nil}}, `apps["a"]: empty app block (guaranteed is required)`},
		{Cluster{Apps: map[string]*App{"a": {Guaranteed: 1, Warmup: -time.Second}}}, `apps["a"].warmup must be >= 0`},
		{Cluster{Apps: map[string]*App{"a/b": {Guaranteed: 1}}}, `apps: invalid app id "a/b"`},
		{Cluster{Capacity: 10, Apps: map[string]*App{"a": {Guaranteed: 10}}}, `apps: sum of guaranteed (10) exceeds`},
		{Cluster{Local: &Local{Reserve: -1}}, `local.reserve must be >= 0, got -1`},
		{Cluster{Local: &Local{RefillThreshold: 2}}, `local.refill_threshold must be in [0,1], got 2`},
		{Cluster{Local: &Local{LeaseTTL: time.Millisecond}}, `local.lease_ttl must be >= 100ms`},
		{Cluster{Local: &Local{StatsInterval: time.Millisecond}}, `local.stats_interval must be >= 1s`},
		{Cluster{Local: &Local{SyncBatch: -1}}, `local.sync_batch must be >= 0, got -1`},
	} {
		_, err := tc.c.Limiter()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.c, err, tc.want)
		}
	}
}
