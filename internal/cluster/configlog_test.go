package cluster

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// A reload that changes a live cluster's policy says once what it changed; one that changes
// nothing of it says nothing.
func TestLogPolicyChange(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	old := limiter.Config{
		Cluster: store.ClusterPolicy{ID: "c", Capacity: 100},
		Apps:    map[string]store.AppPolicy{"a": {Guaranteed: 1, Burst: 1}, "b": {Guaranteed: 2, Burst: 2}, "c": {Guaranteed: 3, Burst: 3}},
	}
	logPolicyChange(log, old, old, connlimit.Config{}, connlimit.Config{})
	if logs.Len() != 0 {
		t.Fatalf("an unchanged policy logged %d lines", logs.Len())
	}
	cur := limiter.Config{
		Cluster: store.ClusterPolicy{ID: "c", Capacity: 200},
		Apps:    map[string]store.AppPolicy{"a": {Guaranteed: 1, Burst: 1}, "b": {Guaranteed: 20, Burst: 20}, "d": {Guaranteed: 4, Burst: 4}},
	}
	logPolicyChange(log, old, cur, connlimit.Config{}, connlimit.Config{App: 5})
	if logs.Len() != 1 {
		t.Fatalf("a changed policy logged %d lines, want 1", logs.Len())
	}
	f := logs.All()[0].ContextMap()
	for k, want := range map[string]any{"cluster": "c", "cluster_policy_changed": true, "connections_changed": true} {
		if f[k] != want {
			t.Errorf("%s = %v, want %v", k, f[k], want)
		}
	}
	for k, want := range map[string]string{"apps_added": "[d]", "apps_removed": "[c]", "apps_changed": "[b]"} {
		if got := fmtList(f[k]); got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
}

func fmtList(v any) string {
	s, _ := v.([]any)
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x.(string)
	}
	return out + "]"
}
