package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// TestRedisTopologies: over each kind of Redis the plugin supports (standalone, Cluster,
// Sentinel, TLS with a client certificate and a private CA, an ACL user), two Limiters with the
// same prefix and cluster draw from one bucket: what one spends, the other cannot take.
func TestRedisTopologies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(t *testing.T, prefix string) *Redis
	}{
		{"standalone", func(t *testing.T, _ string) *Redis {
			return &Redis{Address: []string{redistest.SharedStandalone(t)}}
		}},
		{"cluster", func(t *testing.T, _ string) *Redis {
			return &Redis{Address: redistest.SharedCluster(t)}
		}},
		{"sentinel", func(t *testing.T, _ string) *Redis {
			master, sentinel, _ := redistest.Sentinel(t)
			return &Redis{Address: []string{sentinel}, Sentinel: master}
		}},
		{"tls client auth", func(t *testing.T, _ string) *Redis {
			p := redistest.NewTLS(t, t.TempDir())
			p.AuthClients = true
			s := redistest.StandaloneWith(t, p)
			return &Redis{
				Address: []string{s.TLSAddr()}, RootCAs: p.CertPool(),
				TLSClientCertFile: p.ClientCert, TLSClientKeyFile: p.ClientKey,
			}
		}},
		{"acl user", func(t *testing.T, prefix string) *Redis {
			s := redistest.StandaloneWith(t, nil)
			s.SetUser(t, "limiter", "s3cret", redislua.ACLRules(prefix))
			return &Redis{Address: []string{s.Addr()}, Username: "limiter", Password: "s3cret"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := uniquePrefix()
			r := tc.redis(t, prefix)
			r.KeyPrefix = prefix
			// A call slower than the default 50 ms (a loaded test machine) would admit from the
			// local rescue bucket, which is the failure mode, not the shared bucket under test.
			r.Timeout = 5 * time.Second
			o := Options{Cluster: "topo", Apps: map[string]App{"a": slowApp(5)}, Redis: r}
			a, b := newLimiter(t, o), newLimiter(t, o)
			ctx := context.Background()
			if d := a.AllowN(ctx, "a", 5); !d.Allowed {
				t.Fatalf("instance a: AllowN(a, 5) = %+v", d)
			}
			if d := b.Allow(ctx, "a"); d.Allowed || d.Reason != ReasonAppExhausted {
				t.Errorf("instance b after a spent the burst: %+v, want app_exhausted from the shared bucket", d)
			}
		})
	}
}

// TestRedisRefusedConfiguration: a configuration Redis refuses (a wrong password) is New's
// error, with the cause and its remedy, and without the password.
func TestRedisRefusedConfiguration(t *testing.T) {
	prefix := uniquePrefix()
	s := redistest.StandaloneWith(t, nil)
	s.SetUser(t, "limiter", "right", redislua.ACLRules(prefix))
	l, err := New(Options{Redis: &Redis{Address: []string{s.Addr()}, Username: "limiter", Password: "wrong", KeyPrefix: prefix}})
	if err == nil {
		_ = l.Close()
		t.Fatal("New accepted a wrong password")
	}
	if msg := err.Error(); !strings.Contains(msg, "Redis refuses this configuration") || !strings.Contains(msg, "remedy") || strings.Contains(msg, "wrong") {
		t.Errorf("error %q: want the refusal with its remedy, and never the password", msg)
	}
}

// TestWaitRedis: a waiter on one instance is admitted once the shared bucket, which another
// instance emptied, has refilled its tokens.
func TestWaitRedis(t *testing.T) {
	o := Options{
		Cluster: "wait", Apps: map[string]App{"a": {Guaranteed: 5, Burst: 5}},
		Redis: &Redis{Address: []string{redistest.SharedStandalone(t)}, KeyPrefix: uniquePrefix(), Timeout: 5 * time.Second},
	}
	a, b := newLimiter(t, o), newLimiter(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d := a.AllowN(ctx, "a", 5); !d.Allowed {
		t.Fatalf("instance a: AllowN(a, 5) = %+v", d)
	}
	if d := b.AllowN(ctx, "a", 5); d.Allowed {
		t.Fatalf("instance b found tokens in the emptied bucket: %+v", d)
	}
	if err := b.Wait(ctx, "a", 5); err != nil {
		t.Fatalf("instance b: Wait(a, 5) = %v, want admitted once the shared bucket refilled", err)
	}
}

// TestFailureModes: with Redis unreachable, New still succeeds (an outage is not a
// configuration error) and decisions follow on_redis_failure: local admits about the app's
// rescue bucket (its burst here: one instance), open admits everything, closed refuses
// everything with redis_unavailable.
func TestFailureModes(t *testing.T) {
	s := redistest.StandaloneWith(t, nil)
	addr := s.Addr()
	s.Stop()
	const calls = 50
	for _, tc := range []struct {
		mode     FailureMode
		min, max int
		reason   Reason
	}{
		{FailLocal, 1, 5, ReasonAppExhausted},
		{FailOpen, calls, calls, ""},
		{FailClosed, 0, 0, ReasonRedisUnavailable},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			l := newLimiter(t, Options{
				OnRedisFailure: tc.mode, Apps: map[string]App{"a": slowApp(5)},
				Redis: &Redis{Address: []string{addr}, KeyPrefix: uniquePrefix()},
			})
			admitted := 0
			var last Decision
			for range calls {
				if d := l.Allow(context.Background(), "a"); d.Allowed {
					admitted++
				} else {
					last = d
				}
			}
			if admitted < tc.min || admitted > tc.max {
				t.Errorf("%d of %d admitted, want %d-%d", admitted, calls, tc.min, tc.max)
			}
			if admitted < calls && last.Reason != tc.reason {
				t.Errorf("last refusal %+v, want reason %q", last, tc.reason)
			}
		})
	}
}
