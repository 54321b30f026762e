package redislua

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{Address: []string{"127.0.0.1:6379"}}, ""},
		{Config{Address: []string{"a:1", "b:2", "c:3"}}, ""},
		{Config{Address: []string{"s1:26379", "s2:26379"}, Sentinel: "mymaster", DB: 2}, ""},
		{Config{URL: "rediss://u:p@host:6380/3", TLSInsecureSkipVerify: true}, ""},
		{Config{Address: []string{"a:1"}, TLSServerName: "redis.internal"}, ""},
		{Config{}, "redis.address: an address or a url is required"},
		{Config{Address: []string{"a:1"}, URL: "redis://a:1"}, "redis.address: address and url are mutually exclusive"},
		{Config{Address: []string{"a:1", "nohostport"}}, "redis.address[1]: \"nohostport\""},
		{Config{Address: []string{":6379"}}, "redis.address[0]: \":6379\": missing host"},
		{Config{Address: []string{"a:70000"}}, "redis.address[0]: \"a:70000\": port \"70000\" is not 1-65535"},
		{Config{URL: "http://x"}, "redis.url: redis: invalid URL scheme: http"},
		{Config{URL: "redis://a:1", Sentinel: "m"}, "redis.sentinel: needs the sentinels in address"},
		{Config{Sentinel: "m"}, "redis.sentinel: needs the sentinels' addresses in address"},
		{Config{Address: []string{"s1:26379"}, Sentinel: "m", SentinelUsername: "u", SentinelPassword: "p"}, ""},
		{Config{Address: []string{"a:1"}, SentinelPassword: "p"}, "redis.sentinel_password: needs sentinel"},
		{Config{Address: []string{"a:1"}, SentinelUsername: "u"}, "redis.sentinel_username: needs sentinel"},
		{Config{Address: []string{"a:1"}, DB: -1}, "redis.db: must be >= 0, got -1"},
		{Config{Address: []string{"a:1", "b:1"}, DB: 1}, "redis.db: a Redis Cluster"},
		{Config{Address: []string{"a:1"}, TLSClientAuth: &ClientAuth{CertificateFile: "c.pem"}}, "redis.tls_client_auth: needs both"},
		{Config{URL: "redis://u:s3cr3t@host:bad/0"}, "redis.url:"},
		{Config{Address: []string{"a:1"}, KeyPrefix: "x{y}"}, "redis.key_prefix:"},
		{Config{Address: []string{"a:1"}, Timeout: -time.Second}, "redis.timeout: must be >= 0"},
		{Config{Address: []string{"a:1"}, PoolSize: -1}, "redis.pool_size: must be >= 0"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
		if _, oerr := Open(tc.cfg); tc.want != "" && oerr == nil {
			t.Errorf("%+v: Open accepted an invalid config", tc.cfg)
		}
	}
}

func TestOpenSharesClient(t *testing.T) {
	addr := redistest.SharedStandalone(t)
	a, err := Open(Config{Address: []string{addr}, KeyPrefix: "x"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(Config{Address: []string{addr}, KeyPrefix: "y"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Config{Address: []string{addr}, PoolSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if a.Client() != b.Client() {
		t.Fatal("identical connection settings got two clients")
	}
	if a.Client() == c.Client() {
		t.Fatal("different pool sizes share a client")
	}
	if a.Prefix() != "x" || c.Prefix() != DefaultPrefix {
		t.Fatalf("prefixes %q %q", a.Prefix(), c.Prefix())
	}
	if _, ok := a.Client().(*redis.Client); !ok {
		t.Fatalf("one address should give a standalone client, got %T", a.Client())
	}
	ctx := context.Background()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil { // a second Close is a no-op, it must not release b's reference
		t.Fatal(err)
	}
	if err := b.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("client closed while b still uses it: %v", err)
	}
	b.Close()
	if err := b.Client().Ping(ctx).Err(); err != redis.ErrClosed {
		t.Fatalf("last Close left the client open: %v", err)
	}
	c.Close()
}

func TestOpenKinds(t *testing.T) {
	nodes := redistest.SharedCluster(t)
	s, err := Open(Config{Address: nodes})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.Client().(*redis.ClusterClient); !ok {
		t.Fatalf("several addresses should give a cluster client, got %T", s.Client())
	}
	if err := s.Client().Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	u, err := Open(Config{URL: "redis://" + redistest.SharedStandalone(t) + "/2"})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.Client().Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := u.Client().(*redis.Client).Options().DB; got != 2 {
		t.Fatalf("url db: got %d, want 2", got)
	}
	f, err := Open(Config{Address: []string{"127.0.0.1:1"}, Sentinel: "mymaster"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.Client().(*redis.Client); !ok { // NewFailoverClient returns a *redis.Client
		t.Fatalf("sentinel: got %T", f.Client())
	}
}

// TestOpenSentinel reaches the master through a real Sentinel.
func TestOpenSentinel(t *testing.T) {
	name, sentinel, master := redistest.Sentinel(t)
	s, err := Open(Config{Address: []string{sentinel}, Sentinel: name, KeyPrefix: "sent"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if l := lease(t, s, "a", 7, 7, 1); l.Granted != 7 {
		t.Fatalf("lease through sentinel: %+v", l)
	}
	direct := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer direct.Close()
	if n, err := direct.HGet(context.Background(), s.keys.l2("c1", "a"), "consumed").Int64(); err != nil || n != 7 {
		t.Fatalf("the master holds consumed=%d (%v); want 7", n, err)
	}
}

// TestOpenSentinelWithPassword: sentinels that require a password are reached with
// sentinel_password; without it the error is permanent and its remedy names the option (the
// data nodes' password is another one).
func TestOpenSentinelWithPassword(t *testing.T) {
	name, sentinel, _ := redistest.Sentinel(t)
	admin := redis.NewClient(&redis.Options{Addr: sentinel})
	defer admin.Close()
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "default", "resetpass", ">sentinel-secret").Err(); err != nil {
		t.Fatalf("requiring a password on the sentinel: %v", err)
	}
	without, err := Open(Config{Address: []string{sentinel}, Sentinel: name, KeyPrefix: "sentpw"})
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	_, err = without.Lease(context.Background(), store.LeaseRequest{
		Cluster: store.ClusterPolicy{ID: "c1"}, App: "a", Policy: testPolicy, Factor: 1, Want: 1, Need: 1, Instance: "i1",
	})
	p, ok := store.AsPermanent(err)
	if !ok || !strings.Contains(p.Remedy(), "sentinel_password") || strings.Contains(err.Error(), "sentinel-secret") {
		t.Fatalf("lease through a sentinel that requires a password, without it: %v (permanent %v)", err, ok)
	}
	with, err := Open(Config{Address: []string{sentinel}, Sentinel: name, SentinelPassword: "sentinel-secret", KeyPrefix: "sentpw"})
	if err != nil {
		t.Fatal(err)
	}
	defer with.Close()
	if l := lease(t, with, "a", 7, 7, 1); l.Granted != 7 {
		t.Fatalf("lease through the sentinel with its password: %+v", l)
	}
}

// TestSentinelUnknownMaster: sentinels that answer but know no master by the configured name
// are reported as such, not as "unreachable: redis: nil".
func TestSentinelUnknownMaster(t *testing.T) {
	_, sentinel, _ := redistest.Sentinel(t)
	s, err := Open(Config{Address: []string{sentinel}, Sentinel: "no-such-master", KeyPrefix: "sentnm"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Lease(context.Background(), store.LeaseRequest{
		Cluster: store.ClusterPolicy{ID: "c1"}, App: "a", Policy: testPolicy, Factor: 1, Want: 1, Need: 1, Instance: "i1",
	})
	if err == nil || !strings.Contains(err.Error(), "the sentinels know no master by the name in sentinel") {
		t.Fatalf("lease through sentinels that know no such master: %v", err)
	}
}
