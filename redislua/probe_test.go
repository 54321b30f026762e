package redislua

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// probeT runs Probe with the bound the root package uses.
func probeT(s *Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.Probe(ctx, "c")
}

// The probe asks about every command of ACLCommands but the handshake ones, so the two lists
// cannot drift apart.
func TestProbeCoversACLCommands(t *testing.T) {
	var want []string
	for _, f := range strings.Fields(ACLCommands) {
		if f == "-@all" {
			continue
		}
		name := strings.TrimPrefix(f, "+")
		if !slices.Contains(probeHandshake, name) {
			want = append(want, name)
		}
	}
	var got []string
	for _, c := range probeChecks {
		got = append(got, c.name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("probe checks %v, want the non-handshake commands of ACLCommands %v", got, want)
	}
}

// The probe over TLS as the least-privilege user passes; each refused configuration is a
// permanent error naming its cause; an unreachable Redis is transient; nothing is written.
func TestProbe(t *testing.T) {
	p := redistest.NewTLS(t, t.TempDir())
	srv := redistest.StandaloneWith(t, p)
	aclUser(t, "right", "sec", srv)
	good := Config{
		Address: []string{srv.TLSAddr()}, Username: "rl", Password: "right", KeyPrefix: "sec", RootCAs: p.CertPool(),
	}
	if err := probeT(openT(t, good)); err != nil {
		t.Fatalf("the least-privilege user: %v", err)
	}
	noACLDenials(t, srv)

	t.Run("wrong password", func(t *testing.T) {
		cfg := good
		cfg.Password = "wrong"
		wantPermanent(t, probeT(openT(t, cfg)), KindAuth, "WRONGPASS")
	})
	t.Run("untrusted CA", func(t *testing.T) {
		cfg := good
		cfg.RootCAs = redistest.NewTLS(t, t.TempDir()).CertPool()
		wantPermanent(t, probeT(openT(t, cfg)), KindCertificate, "unknown authority")
	})
	t.Run("missing commands", func(t *testing.T) {
		srv.SetUser(t, "narrow", "pw", strings.NewReplacer("+hset ", "", "+subscribe", "").Replace(ACLRules("sec")))
		cfg := good
		cfg.Username, cfg.Password = "narrow", "pw"
		err := probeT(openT(t, cfg))
		wantPermanent(t, err, KindPermission, "may not run hset, subscribe")
	})
	t.Run("missing channel pattern", func(t *testing.T) {
		srv.SetUser(t, "nochan", "pw", strings.Replace(ACLRules("sec"), "&sec:*", "", 1))
		cfg := good
		cfg.Username, cfg.Password = "nochan", "pw"
		wantPermanent(t, probeT(openT(t, cfg)), KindPermission, "may not run publish, subscribe")
	})
	t.Run("key outside the prefix", func(t *testing.T) {
		cfg := good
		cfg.KeyPrefix = "other"
		wantPermanent(t, probeT(openT(t, cfg)), KindPermission, "may not run evalsha, eval, hget")
	})
	t.Run("no EVAL", func(t *testing.T) {
		srv.SetUser(t, "noeval", "pw", strings.Replace(ACLRules("sec"), "+eval ", "", 1))
		cfg := good
		cfg.Username, cfg.Password = "noeval", "pw"
		wantPermanent(t, probeT(openT(t, cfg)), KindPermission, "NOPERM")
	})
	t.Run("unreachable is transient and bounded", func(t *testing.T) {
		cfg := good
		cfg.Address = []string{"127.0.0.1:1"}
		start := time.Now()
		err := probeT(openT(t, cfg))
		if err == nil {
			t.Fatal("no error")
		}
		if _, ok := store.AsPermanent(err); ok {
			t.Fatalf("%v: classified permanent", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("probe took %v", d)
		}
	})
	// Asking is not running: the probe wrote nothing.
	if n, err := srv.Do("DBSIZE"); err != nil || n != int64(0) {
		t.Fatalf("DBSIZE after the probes: %v %v", n, err)
	}
}
