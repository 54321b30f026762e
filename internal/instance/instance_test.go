package instance

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// closeCounting is a memory Store that counts its Close calls and stays open, so that a test
// can look at what was given back to it.
type closeCounting struct {
	store.Store
	closed atomic.Int32
}

func (c *closeCounting) Close() error {
	c.closed.Add(1)
	return nil
}

func config() limiter.Config {
	return limiter.Config{
		Cluster: store.ClusterPolicy{ID: "c"},
		Apps:    map[string]store.AppPolicy{"a": {Guaranteed: 0.001, Burst: 10}},
		Default: store.AppPolicy{Guaranteed: 1, Burst: 1, Priority: 3},
	}
}

// TestStartFailureClosesStore: a configuration the limiter refuses is Start's error, and the
// Store handed over is closed all the same.
func TestStartFailureClosesStore(t *testing.T) {
	st := &closeCounting{Store: memstore.New(nil)}
	cfg := config()
	cfg.Apps["a"] = store.AppPolicy{Guaranteed: 10, Burst: 5}
	if p, err := Start(cfg, limiterConns(), st, nil); err == nil {
		_ = p.Close()
		t.Fatal("Start accepted burst < guaranteed")
	}
	if n := st.closed.Load(); n != 1 {
		t.Errorf("the Store was closed %d times, want 1", n)
	}
}

// TestCloseGivesBack: Close returns the unspent leased tokens to the Store (a new instance on
// it finds the whole burst again minus what was spent), and closes the Store once.
func TestCloseGivesBack(t *testing.T) {
	mem := memstore.New(nil)
	st := &closeCounting{Store: mem}
	p, err := Start(config(), limiterConns(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Limiter.App("a")
	if d := a.Take(context.Background(), 4, 0); !d.Allowed {
		t.Fatalf("Take(4) = %+v", d)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := st.closed.Load(); n != 1 {
		t.Errorf("the Store was closed %d times, want 1", n)
	}
	l2, err := limiter.New(config(), mem)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	a2, _ := l2.App("a")
	if d := a2.Take(context.Background(), 6, 0); !d.Allowed {
		t.Errorf("the 6 unspent tokens did not come back to the Store: Take(6) = %+v", d)
	}
	if d := a2.Take(context.Background(), 1, 0); d.Allowed {
		t.Errorf("more than the unspent tokens came back: %+v", d)
	}
}

// limiterConns are the in-flight defaults.
func limiterConns() connlimit.Config { return connlimit.Config{} }
