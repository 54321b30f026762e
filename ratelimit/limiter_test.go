package ratelimit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNewRejectsBadOptions: invalid options are an error naming the field as the Caddyfile
// does, with the plugin's messages, and New returns no Limiter.
func TestNewRejectsBadOptions(t *testing.T) {
	neg := -0.5
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"burst below guaranteed", Options{Apps: map[string]App{"a": {Guaranteed: 10, Burst: 5}}}, `apps["a"].burst must be >= guaranteed (10), got 5`},
		{"no guaranteed", Options{Apps: map[string]App{"a": {}}}, `apps["a"].guaranteed must be > 0`},
		{"priority", Options{Apps: map[string]App{"a": {Guaranteed: 1, Priority: 4}}}, `apps["a"].priority must be 0-3, got 4`},
		{"invalid app id", Options{Apps: map[string]App{"a b": {Guaranteed: 1}}}, `apps: invalid app id "a b"`},
		{"template", Options{Apps: map[string]App{"*": {Guaranteed: 1, Burst: 0.5}}}, `apps["*"].burst`},
		{"cluster id", Options{Cluster: "no/slash"}, `cluster: invalid id "no/slash"`},
		{"reserved ratio", Options{ReservedRatio: &neg}, `reserved_ratio must be in [0,1), got -0.5`},
		{"emergency ratios", Options{EmergencyRatios: []float64{1, 0.5}}, `emergency_ratios needs 4 values (P0..P3), got 2`},
		{"admission", Options{Capacity: 100, Apps: map[string]App{"a": {Guaranteed: 95}}}, `apps: sum of guaranteed (95) exceeds (1 - reserved_ratio) × capacity = 90`},
		{"unknown_app", Options{UnknownApp: "drop"}, `unknown_app must be shared, isolated or reject, got "drop"`},
		{"on_redis_failure", Options{OnRedisFailure: "maybe"}, `on_redis_failure must be local, open or closed, got "maybe"`},
		{"connections", Options{Connections: &Connections{App: -1}}, `connections.app must be > 0`},
		{"local", Options{Local: &Local{SyncInterval: time.Millisecond}}, `local.sync_interval must be >= 10ms`},
		{"redis without address", Options{Redis: &Redis{}}, `redis.address: an address or a url is required`},
		{"redis address", Options{Redis: &Redis{Address: []string{"localhost"}}}, `redis.address[0]: "localhost"`},
		{"redis user without password", Options{Redis: &Redis{Address: []string{"127.0.0.1:1"}, Username: "u"}}, `redis.password: is required with username "u"`},
		{"redis client cert alone", Options{Redis: &Redis{Address: []string{"127.0.0.1:1"}, TLSClientCertFile: "c.pem"}}, `redis.tls_client_auth: needs both a certificate file and a key file`},
		{"redis prefix", Options{Redis: &Redis{Address: []string{"127.0.0.1:1"}, KeyPrefix: "a{b}"}}, `redis.key_prefix`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(tc.o)
			if err == nil {
				_ = l.Close()
				t.Fatalf("New accepted %+v", tc.o)
			}
			if l != nil {
				t.Errorf("New returned a Limiter with the error %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ratelimit: ") {
				t.Errorf("error %q, want it to start with \"ratelimit: \" and contain %q", err, tc.want)
			}
		})
	}
}

// TestMisuse: an invalid key, a cost <= 0 and a closed Limiter are refused with a precise
// error, never a panic, and take nothing.
func TestMisuse(t *testing.T) {
	ctx := context.Background()
	l := newLimiter(t, Options{Apps: map[string]App{"a": slowApp(3)}})
	for _, tc := range []struct {
		key    string
		cost   int64
		err    error
		reason Reason
	}{
		{"", 1, ErrInvalidKey, ReasonInvalidAppID},
		{"has space", 1, ErrInvalidKey, ReasonInvalidAppID},
		{strings.Repeat("k", 129), 1, ErrInvalidKey, ReasonInvalidAppID},
		{"a", 0, ErrInvalidCost, ""},
		{"a", -5, ErrInvalidCost, ""},
	} {
		d := l.AllowN(ctx, tc.key, tc.cost)
		if d.Allowed || !errors.Is(d.Err, tc.err) || d.Reason != tc.reason {
			t.Errorf("AllowN(%q, %d) = %+v, want refused with %v and reason %q", tc.key, tc.cost, d, tc.err, tc.reason)
		}
		if err := l.Wait(ctx, tc.key, tc.cost); !errors.Is(err, tc.err) {
			t.Errorf("Wait(%q, %d) = %v, want %v", tc.key, tc.cost, err, tc.err)
		}
		if _, d := l.Acquire(tc.key); tc.cost > 0 && (d.Allowed || !errors.Is(d.Err, tc.err)) {
			t.Errorf("Acquire(%q) = %+v, want refused with %v", tc.key, d, tc.err)
		}
	}
	if d := l.AllowN(ctx, "a", 3); !d.Allowed {
		t.Fatalf("the misuses took tokens: AllowN(a, 3) = %+v", d)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if d := l.Allow(ctx, "a"); d.Allowed || !errors.Is(d.Err, ErrClosed) {
		t.Errorf("Allow after Close = %+v, want ErrClosed", d)
	}
	if err := l.Wait(ctx, "a", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after Close = %v, want ErrClosed", err)
	}
	if err := l.Wait(nil, "a", 1); !errors.Is(err, ErrClosed) { //nolint:staticcheck // a nil context is misuse that must not panic
		t.Errorf("Wait(nil context) after Close = %v, want ErrClosed", err)
	}
	var none *Limiter // what a failed New returns
	if d := none.Allow(ctx, "a"); d.Allowed || !errors.Is(d.Err, ErrClosed) {
		t.Errorf("Allow on a nil Limiter = %+v, want ErrClosed", d)
	}
	if err := none.Wait(ctx, "a", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait on a nil Limiter = %v, want ErrClosed", err)
	}
	if _, d := none.Acquire("a"); d.Allowed || !errors.Is(d.Err, ErrClosed) {
		t.Errorf("Acquire on a nil Limiter = %+v, want ErrClosed", d)
	}
	if err := none.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("Close on a nil Limiter = %v, want ErrClosed", err)
	}
}

// TestAllowNTakesCost: AllowN takes cost tokens: a burst of 10 admits 4 + 6 and refuses the
// next token with app_exhausted and a retry-after.
func TestAllowNTakesCost(t *testing.T) {
	ctx := context.Background()
	l := newLimiter(t, Options{Apps: map[string]App{"a": slowApp(10)}})
	for _, cost := range []int64{4, 6} {
		if d := l.AllowN(ctx, "a", cost); !d.Allowed || d.Err != nil || d.Limit != 10 {
			t.Fatalf("AllowN(a, %d) = %+v, want allowed with limit 10", cost, d)
		}
	}
	d := l.Allow(ctx, "a")
	if d.Allowed || d.Reason != ReasonAppExhausted || d.RetryAfter <= 0 || d.Remaining != 0 {
		t.Errorf("Allow after the burst = %+v, want app_exhausted, a retry-after, 0 remaining", d)
	}
}

// TestUnknownApps: keys without a policy share the "*" template's bucket by default, and are
// refused with unknown_app under UnknownReject (Wait: ErrUnknownApp).
func TestUnknownApps(t *testing.T) {
	ctx := context.Background()
	shared := newLimiter(t, Options{Apps: map[string]App{"*": slowApp(2)}})
	if !shared.Allow(ctx, "x").Allowed || !shared.Allow(ctx, "y").Allowed {
		t.Fatal("the shared template refused its burst")
	}
	if d := shared.Allow(ctx, "z"); d.Allowed || d.Reason != ReasonAppExhausted {
		t.Errorf("a third unknown key = %+v, want app_exhausted: unknown keys share one bucket", d)
	}
	reject := newLimiter(t, Options{UnknownApp: UnknownReject, Apps: map[string]App{"a": slowApp(2)}})
	if d := reject.Allow(ctx, "x"); d.Allowed || d.Reason != ReasonUnknownApp || d.Err != nil {
		t.Errorf("unknown key under reject = %+v, want unknown_app", d)
	}
	if err := reject.Wait(ctx, "x", 1); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("Wait for an unknown key under reject = %v, want ErrUnknownApp", err)
	}
}

// TestWaitMemory: a waiter whose tokens are not there is admitted once the bucket has refilled
// them; a waiter whose tokens cannot come in time gets its context's error.
func TestWaitMemory(t *testing.T) {
	l := newLimiter(t, Options{Apps: map[string]App{"a": {Guaranteed: 5, Burst: 5}, "slow": slowApp(1)}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d := l.AllowN(ctx, "a", 5); !d.Allowed {
		t.Fatalf("AllowN(a, 5) = %+v", d)
	}
	if d := l.AllowN(ctx, "a", 5); d.Allowed {
		t.Fatalf("the bucket was not empty: AllowN(a, 5) = %+v", d)
	}
	if err := l.Wait(ctx, "a", 5); err != nil {
		t.Fatalf("Wait(a, 5) = %v, want admitted once refilled", err)
	}

	if !l.Allow(ctx, "slow").Allowed {
		t.Fatal("Allow(slow) refused its burst")
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	err := l.Wait(short, "slow", 1)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "app_exhausted") {
		t.Errorf("Wait for a token 1000 s away = %v, want the deadline, naming app_exhausted", err)
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if err := l.Wait(done, "a", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a done context = %v, want context.Canceled", err)
	}
}

// TestAcquire: in-flight slots up to MaxConnections, then app_limit_exceeded; a release frees
// one, and a second release of the same slot frees nothing.
func TestAcquire(t *testing.T) {
	l := newLimiter(t, Options{Apps: map[string]App{"a": {Guaranteed: 10, MaxConnections: 2}}, Connections: &Connections{Cluster: 3}})
	r1, d1 := l.Acquire("a")
	r2, d2 := l.Acquire("a")
	if !d1.Allowed || !d2.Allowed || d2.Limit != 2 || d2.Remaining != 0 {
		t.Fatalf("two slots of 2: %+v %+v", d1, d2)
	}
	if _, d := l.Acquire("a"); d.Allowed || d.Reason != ReasonAppLimitExceeded || d.Limit != 2 {
		t.Fatalf("a third slot = %+v, want app_limit_exceeded with limit 2", d)
	}
	r1()
	r1() // no-op
	r3, d3 := l.Acquire("a")
	if !d3.Allowed {
		t.Fatalf("after a release: %+v", d3)
	}
	if _, d := l.Acquire("a"); d.Allowed {
		t.Fatalf("the second release of one slot freed another: %+v", d)
	}
	rb, db := l.Acquire("b") // the template: the cluster has 3 slots, 2 are held
	if !db.Allowed {
		t.Fatalf("Acquire(b) = %+v", db)
	}
	if _, d := l.Acquire("c"); d.Allowed || d.Reason != ReasonClusterLimitExceeded || d.Limit != 3 {
		t.Errorf("a fourth slot in the cluster = %+v, want cluster_limit_exceeded with limit 3", d)
	}
	r2()
	r3()
	rb()
}

// TestConcurrentAllowN: callers on many goroutines together get no more than the app's burst
// plus its rate over the time they took, and every call gets a decision.
func TestConcurrentAllowN(t *testing.T) {
	const (
		guaranteed = 10.0
		burst      = 100.0
		goroutines = 8
		calls      = 500
	)
	start := time.Now()
	l := newLimiter(t, Options{Apps: map[string]App{"a": {Guaranteed: guaranteed, Burst: burst}}})
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls {
				if d := l.Allow(context.Background(), "a"); d.Allowed {
					admitted.Add(1)
				} else if d.Reason != "" {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	bound := burst + guaranteed*time.Since(start).Seconds()
	if n := admitted.Load(); float64(n) > bound || n == 0 {
		t.Errorf("admitted %d, want 1..%.1f", n, bound)
	}
	if n := admitted.Load() + refused.Load(); n != goroutines*calls {
		t.Errorf("%d decisions with a verdict, want %d", n, goroutines*calls)
	}
}

// TestDisabledApp: a disabled app is refused with app_disabled, and Wait says so at once
// instead of waiting for tokens that would not help.
func TestDisabledApp(t *testing.T) {
	l := newLimiter(t, Options{Apps: map[string]App{"off": {Guaranteed: 10, Disabled: true}, "on": {Guaranteed: 10}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if d := l.Allow(ctx, "off"); d.Allowed || d.Reason != ReasonAppDisabled {
		t.Fatalf("Allow(off) = %+v, want app_disabled", d)
	}
	if err := l.Wait(ctx, "off", 1); !errors.Is(err, ErrAppDisabled) || ctx.Err() != nil {
		t.Fatalf("Wait(off) = %v (context %v), want ErrAppDisabled at once", err, ctx.Err())
	}
	if d := l.Allow(ctx, "on"); !d.Allowed {
		t.Fatalf("Allow(on) = %+v", d)
	}
}
