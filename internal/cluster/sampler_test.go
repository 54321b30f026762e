package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// newCtx is a config generation of its own.
func newCtx(t *testing.T) caddy.Context {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return ctx
}

// memoryDefinition defines cluster id on the memory store with one app.
func memoryDefinition(id string) Definition {
	return Definition{
		Key:         Key{Cluster: id, Store: "memory"},
		Fingerprint: id,
		Limiter: limiter.Config{
			Cluster:  store.ClusterPolicy{ID: id, ReservedRatio: 0.1, EmergencyThreshold: 0.95},
			Apps:     map[string]store.AppPolicy{"a": {Guaranteed: 10, Burst: 10}},
			Default:  store.AppPolicy{Guaranteed: 1, Burst: 1, Priority: store.MaxPriority},
			Instance: "test",
		},
	}
}

// TestSamplerStops: the sampler records at once, and close ends its goroutine.
func TestSamplerStops(t *testing.T) {
	s, release, err := Acquire(newCtx(t), memoryDefinition("unit-sampler"), Options{
		Reading: func(*State) history.Reading { return history.Reading{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, _, ok := s.History().Latest(); !ok {
		t.Fatal("no sample at the state's start")
	}
	sm := startSampler(s, func(*State) history.Reading { return history.Reading{} })
	sm.close()
	select {
	case <-sm.done:
	default:
		t.Fatal("the sampler still runs after close")
	}
	if d := untilNextSecond(time.Unix(5, 999_000_000)); d != 21*time.Millisecond {
		t.Errorf("untilNextSecond(5.999) = %v, want 21ms", d)
	}
}

// TestReleaseClosesTheState: the last release closes the state and forgets it.
func TestReleaseClosesTheState(t *testing.T) {
	def := memoryDefinition("unit-release")
	_, release, err := Acquire(newCtx(t), def, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := References(def.Key); !ok || n != 1 {
		t.Fatalf("references %d, %v; want 1", n, ok)
	}
	release()
	release() // exactly once
	if _, ok := References(def.Key); ok {
		t.Fatal("the state outlived its last handler")
	}
	for _, s := range Live() {
		if s.ID() == "unit-release" {
			t.Fatal("a closed state is still listed")
		}
	}
}
