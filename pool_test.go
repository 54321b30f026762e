package tierbucket

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
	"github.com/tierbucket/caddy-tierbucket/redislua"
)

func newCtx(t *testing.T) caddy.Context {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return ctx
}

func setupOn(t *testing.T, ctx caddy.Context, h *Handler) error {
	t.Helper()
	err := h.setup(ctx)
	if err == nil {
		t.Cleanup(func() { _ = h.Cleanup() })
	}
	return err
}

func policy(cluster string, guaranteed float64) *Handler {
	return &Handler{Cluster: cluster, Apps: map[string]*AppConfig{"a": {Guaranteed: guaranteed}}}
}

// TestClusterConflictsInOneConfig: within one config generation a cluster id has one
// definition; across generations (a reload) it may change.
func TestClusterConflictsInOneConfig(t *testing.T) {
	gen1 := newCtx(t)
	if err := setupOn(t, gen1, policy("pool-conflict", 10)); err != nil {
		t.Fatal(err)
	}
	// same generation, identical definition (two sites importing one snippet): fine
	same := policy("pool-conflict", 10)
	same.Key = "{http.request.header.X}" // per-handler fields may differ
	same.Headers = "off"
	if err := setupOn(t, gen1, same); err != nil {
		t.Fatalf("identical definition rejected: %v", err)
	}
	// same generation, different policy: a conflict
	err := setupOn(t, gen1, policy("pool-conflict", 20))
	if err == nil || !strings.Contains(err.Error(), `cluster "pool-conflict": conflicting definitions`) {
		t.Fatalf("conflict not detected: %v", err)
	}
	// same generation, another store for the same id: also a conflict
	withRedis := policy("pool-conflict", 10)
	withRedis.Redis = &RedisConfig{Config: redislua.Config{Address: []string{"127.0.0.1:1"}}}
	if err := setupOn(t, gen1, withRedis); err == nil || !strings.Contains(err.Error(), "conflicting") {
		t.Fatalf("store conflict not detected: %v", err)
	}
	// another generation (a reload) may change it
	gen2 := newCtx(t)
	if err := setupOn(t, gen2, policy("pool-conflict", 20)); err != nil {
		t.Fatalf("reload with a changed policy rejected: %v", err)
	}
}

// TestReloadAppliesAndFailedReloadRestores: a new generation's policy is applied to the live
// state (same limiter, tokens kept); if that generation goes away while the old one still runs
// (a failed reload), the old policy is applied again.
func TestReloadAppliesAndFailedReloadRestores(t *testing.T) {
	oldGen := newCtx(t)
	old := policy("pool-reload", 10)
	if err := setupOn(t, oldGen, old); err != nil {
		t.Fatal(err)
	}
	app, _ := old.state.Limiter().App("a")
	if d := app.Take(context.Background(), 4, 0); !d.Allowed {
		t.Fatalf("take: %+v", d)
	}
	newGen := newCtx(t)
	h2 := policy("pool-reload", 30)
	if err := h2.setup(newGen); err != nil {
		t.Fatal(err)
	}
	if h2.state != old.state {
		t.Fatal("a reload of the same cluster got a new state")
	}
	if got := old.state.Limiter().Config().Apps["a"].Guaranteed; got != 30 {
		t.Errorf("new policy not applied: guaranteed %v", got)
	}
	if app2, _ := h2.state.Limiter().App("a"); app2 != app {
		t.Error("the app's bucket was replaced on reload")
	}
	// the new config fails later and is cleaned up: the old policy comes back
	_ = h2.Cleanup()
	if got := old.state.Limiter().Config().Apps["a"].Guaranteed; got != 10 {
		t.Errorf("failed reload left policy guaranteed %v, want 10", got)
	}
	if n, ok := cluster.References(old.state.Key()); !ok || n != 1 {
		t.Errorf("references %d %v, want 1", n, ok)
	}
	// last reference gone: the state is closed and removed
	_ = old.Cleanup()
	if _, ok := cluster.References(old.state.Key()); ok {
		t.Error("state still in the pool after the last cleanup")
	}
	_ = old.Cleanup() // idempotent
}

// TestStoreChangeMakesNewState: pointing a cluster at another Store on reload gives a new
// state; the old one closes when the old config goes.
func TestStoreChangeMakesNewState(t *testing.T) {
	g1 := newCtx(t)
	h1 := policy("pool-store", 10)
	if err := setupOn(t, g1, h1); err != nil {
		t.Fatal(err)
	}
	g2 := newCtx(t)
	h2 := policy("pool-store", 10)
	h2.Redis = &RedisConfig{Config: redislua.Config{Address: []string{"127.0.0.1:1"}}} // never dialled in this test
	if err := setupOn(t, g2, h2); err != nil {
		t.Fatal(err)
	}
	if h1.state == h2.state || h2.state.Key().Store == "memory" {
		t.Errorf("states %v %v", h1.state.Key(), h2.state.Key())
	}
}

// A reload that changes the Redis credentials (the fix of a refused password) gets a new state,
// whose client uses them; one that changes only the client's tuning keeps the state. The key
// holds a digest of the credentials, never the password.
func TestCredentialChangeMakesNewState(t *testing.T) {
	redisPolicy := func(pw string, timeout time.Duration) *Handler {
		h := policy("pool-cred", 10)
		h.Redis = &RedisConfig{
			Config:  redislua.Config{Address: []string{"127.0.0.1:1"}, Password: pw},
			Timeout: caddy.Duration(timeout),
		} // nothing listens: the probe gives up at once
		return h
	}
	g1 := newCtx(t)
	h1 := redisPolicy("old-pw-a1", 50*time.Millisecond)
	if err := setupOn(t, g1, h1); err != nil {
		t.Fatal(err)
	}
	g2 := newCtx(t)
	h2 := redisPolicy("old-pw-a1", 80*time.Millisecond)
	if err := setupOn(t, g2, h2); err != nil {
		t.Fatal(err)
	}
	if h1.state != h2.state {
		t.Errorf("a timeout change made a new state: %v %v", h1.state.Key(), h2.state.Key())
	}
	g3 := newCtx(t)
	h3 := redisPolicy("new-pw-b2", 80*time.Millisecond)
	if err := setupOn(t, g3, h3); err != nil {
		t.Fatal(err)
	}
	if h3.state == h2.state || h3.state.Key().Store != h2.state.Key().Store {
		t.Errorf("a password change: states %v %v, want a new state on the same Store", h2.state.Key(), h3.state.Key())
	}
	if k := fmt.Sprint(h3.state.Key()); strings.Contains(k, "new-pw-b2") {
		t.Errorf("the pool key holds the password: %s", k)
	}
}
