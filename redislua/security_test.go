package redislua

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/store"
	"github.com/tierbucket/caddy-tierbucket/store/storetest"
)

// aclUser creates the user "rl" with password pw and exactly ACLRules(prefix) on every server.
func aclUser(t *testing.T, pw, prefix string, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		s.SetUser(t, "rl", pw, ACLRules(prefix))
	}
}

// openT opens a Store on cfg and closes it at the end of the test.
func openT(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// probeLease is one lease with a short deadline: its error, if any.
func probeLease(s *Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := s.Lease(ctx, store.LeaseRequest{
		Cluster: store.ClusterPolicy{ID: "c"}, App: "a", Policy: testPolicy, Factor: 1, Want: 1, Need: 1, Instance: "i",
	})
	return err
}

// wantPermanent checks that err is a permanent error of kind k whose message contains text.
func isPermanent(err error) bool {
	_, ok := store.AsPermanent(err)
	return ok
}

func wantPermanent(t *testing.T, err error, k ErrorKind, text string) {
	t.Helper()
	p, ok := store.AsPermanent(err)
	var pe *PermanentError
	if !ok || !errors.As(err, &pe) || pe.Kind != k {
		t.Fatalf("error %v: want a permanent %s error", err, k)
	}
	if !strings.Contains(err.Error(), text) || p.Remedy() == "" {
		t.Fatalf("error %q (remedy %q): want one mentioning %q, with a remedy", err, p.Remedy(), text)
	}
}

// The whole behavioural suite, over TLS with a private CA and required client certificates, as
// the least-privilege ACL user: every script and command the Store uses is allowed by
// ACLRules, over a verified connection.
func TestTLSACLSuiteStandalone(t *testing.T) {
	p := redistest.NewTLS(t, t.TempDir())
	p.AuthClients = true
	srv := redistest.StandaloneWith(t, p)
	aclUser(t, "pw-standalone", "sec", srv)
	st := openT(t, Config{
		Address: []string{srv.TLSAddr()}, Username: "rl", Password: "pw-standalone", KeyPrefix: "sec",
		RootCAs: p.CertPool(), TLSClientAuth: &ClientAuth{CertificateFile: p.ClientCert, KeyFile: p.ClientKey},
	})
	storetest.Run(t, func(t *testing.T, clk clock.Clock) store.Store {
		return New(st.Client(), "sec", WithClock(clk))
	})
	noACLDenials(t, srv)
}

func TestTLSACLSuiteCluster(t *testing.T) {
	redistest.Slow(t, "starts a 3-node TLS Redis Cluster")
	p := redistest.NewTLS(t, t.TempDir())
	c := redistest.StartCluster(t, redistest.ClusterOptions{TLS: p})
	aclUser(t, "pw-cluster", "sec", c.Nodes...)
	st := openT(t, Config{
		Address: redistest.TLSAddrs(c.Nodes), Username: "rl", Password: "pw-cluster", KeyPrefix: "sec",
		RootCAs: p.CertPool(),
	})
	storetest.Run(t, func(t *testing.T, clk clock.Clock) store.Store {
		return New(st.Client(), "sec", WithClock(clk))
	})
	noACLDenials(t, c.Nodes...)
}

// noACLDenials checks that Redis refused the user nothing (its ACL LOG is empty): the client
// sends no command outside ACLRules, not even one whose refusal it would ignore.
func noACLDenials(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		v, err := s.Do("ACL", "LOG")
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := v.([]any); len(l) != 0 {
			t.Fatalf("%s: Redis refused commands (ACL LOG): %v", s.Addr(), v)
		}
	}
}

// The permanent errors: each is classified, with its cause in the message and a remedy.
func TestPermanentErrors(t *testing.T) {
	p := redistest.NewTLS(t, t.TempDir())
	p.AuthClients = true
	srv := redistest.StandaloneWith(t, p)
	aclUser(t, "right", "sec", srv)
	good := Config{
		Address: []string{srv.TLSAddr()}, Username: "rl", Password: "right", KeyPrefix: "sec",
		RootCAs: p.CertPool(), TLSClientAuth: &ClientAuth{CertificateFile: p.ClientCert, KeyFile: p.ClientKey},
	}
	if err := probeLease(openT(t, good)); err != nil {
		t.Fatalf("the good config: %v", err)
	}

	t.Run("wrong CA", func(t *testing.T) {
		cfg := good
		cfg.RootCAs = redistest.NewTLS(t, t.TempDir()).CertPool()
		wantPermanent(t, probeLease(openT(t, cfg)), KindCertificate, "certificate signed by unknown authority")
	})
	t.Run("system roots", func(t *testing.T) {
		cfg := good
		cfg.RootCAs, cfg.TLS = nil, true
		wantPermanent(t, probeLease(openT(t, cfg)), KindCertificate, "certificate")
	})
	t.Run("wrong server name", func(t *testing.T) {
		cfg := good
		cfg.TLSServerName = "other.test"
		wantPermanent(t, probeLease(openT(t, cfg)), KindCertificate, "other.test")
	})
	t.Run("right server name", func(t *testing.T) {
		cfg := good
		cfg.TLSServerName = "redis.test"
		if err := probeLease(openT(t, cfg)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		cfg := good
		cfg.TLSClientAuth = nil
		// In TLS 1.3 the server refuses a missing client certificate after the client's
		// handshake is done: a busy client may write its command first and read a reset
		// instead of the alert, a transient error. The limiter's episode turns permanent at
		// the first call that reads the alert (the limiter package's tests check that); here,
		// a few calls must get there.
		s := openT(t, cfg)
		err := probeLease(s)
		for i := 0; i < 5 && !isPermanent(err); i++ {
			err = probeLease(s)
		}
		wantPermanent(t, err, KindTLS, "certificate")
	})
	t.Run("wrong password", func(t *testing.T) {
		cfg := good
		cfg.Password = "wrong"
		err := probeLease(openT(t, cfg))
		wantPermanent(t, err, KindAuth, "WRONGPASS")
		if strings.Contains(err.Error(), "wrong") && !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("the password is in the error: %v", err)
		}
	})
	t.Run("missing permission", func(t *testing.T) {
		// The user may run the scripts, but not every command they call.
		srv.SetUser(t, "narrow", "narrowpw", "on ~sec:* &sec:* -@all +hello +auth +ping +evalsha +eval +time +hget")
		cfg := good
		cfg.Username, cfg.Password = "narrow", "narrowpw"
		wantPermanent(t, probeLease(openT(t, cfg)), KindPermission, "can't run this command")
	})
	t.Run("key outside the prefix", func(t *testing.T) {
		cfg := good
		cfg.KeyPrefix = "other"
		wantPermanent(t, probeLease(openT(t, cfg)), KindPermission, "NOPERM")
	})
	t.Run("db beyond the server's databases", func(t *testing.T) {
		cfg := good
		cfg.DB = 16 // redis-server has 16 by default
		wantPermanent(t, probeLease(openT(t, cfg)), KindDatabase, "DB index is out of range")
	})
	t.Run("plain connection to the TLS port", func(t *testing.T) {
		cfg := good
		cfg.RootCAs, cfg.TLSClientAuth = nil, nil
		wantPermanent(t, probeT(openT(t, cfg)), KindTLSRequired, srv.TLSAddr()+" closes plain connections")
	})
	t.Run("a server closing connections is transient", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		cfg := good
		cfg.Address, cfg.RootCAs, cfg.TLSClientAuth = []string{ln.Addr().String()}, nil, nil
		err = probeT(openT(t, cfg))
		if err == nil || isPermanent(err) {
			t.Fatalf("error %v: want a transient one", err)
		}
	})
	t.Run("a refused connection is transient", func(t *testing.T) {
		cfg := good
		cfg.Address = []string{"127.0.0.1:1"}
		err := probeLease(openT(t, cfg))
		if err == nil {
			t.Fatal("no error")
		}
		if _, ok := store.AsPermanent(err); ok {
			t.Fatalf("%v: classified permanent", err)
		}
	})
}

// A username without a password would reach Redis as its default user (go-redis sends no AUTH
// without a password): refused, for the data nodes and for the sentinels.
func TestUsernameNeedsPassword(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Address: []string{"127.0.0.1:6379"}, Username: "caddy"}, "redis.password"},
		{Config{Address: []string{"127.0.0.1:26379"}, Sentinel: "m", SentinelUsername: "s"}, "redis.sentinel_password"},
		{Config{URL: "redis://bob@127.0.0.1:6379/0"}, "redis.url"},
		{Config{URL: "redis://:@127.0.0.1:6379/0"}, "redis.url"}, // redis://:{env.UNSET}@…
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.field+": ") || !strings.Contains(err.Error(), "default user") {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.field)
		}
	}
	for _, ok := range []Config{
		{Address: []string{"127.0.0.1:6379"}, Username: "caddy", Password: "x"},
		{URL: "redis://caddy:x@127.0.0.1:6379/0"},
		{URL: "redis://:x@127.0.0.1:6379/0"},
		{URL: "redis://127.0.0.1:6379/0"},
		{URL: "redis://bob@127.0.0.1:6379/0", Password: "pw"},  // the block's password is used
		{URL: "redis://:pw@127.0.0.1:6379/0", Username: "bob"}, // and the url's with the block's user
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// A URL's credentials never appear in a validation error.
func TestURLErrorRedacted(t *testing.T) {
	err := Config{URL: "redis://user:s3cr3t-pw@host:notaport/0"}.Validate()
	if err == nil || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("error %v: want one without the password", err)
	}
}

// docs/security.md quotes the ACL the tests run as.
func TestSecurityDocQuotesACL(t *testing.T) {
	b, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), ACLRules("ratelimit")) {
		t.Fatalf("docs/security.md does not quote ACLRules(\"ratelimit\"):\n%s", ACLRules("ratelimit"))
	}
}

// The addresses the TLS-port diagnosis dials: those dialled without TLS, never a sentinel's.
func TestPlainAddrs(t *testing.T) {
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
		want   []string
	}{
		{"standalone", redis.NewClient(&redis.Options{Addr: "a:1"}), []string{"a:1"}},
		{"standalone with tls", redis.NewClient(&redis.Options{Addr: "a:1", TLSConfig: &tls.Config{}}), nil},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"a:1", "b:2"}}), []string{"a:1", "b:2"}},
		{"cluster with tls", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"a:1"}, TLSConfig: &tls.Config{}}), nil},
		{"sentinel", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s:1"}}), nil},
	} {
		s := New(c.client, "")
		if got := s.plainAddrs(); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		c.client.Close()
	}
}
