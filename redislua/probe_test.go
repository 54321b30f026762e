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

// A subscription Redis refuses (no SUBSCRIBE permission) is reported once however often it is
// tried again, and recovers once the operator grants the permission: notifications arrive.
// Refused again later (the channel pattern revoked), it is reported again, once.
func TestProbeWatchRefused(t *testing.T) {
	old := watchRefusedRetry
	watchRefusedRetry = 20 * time.Millisecond
	t.Cleanup(func() { watchRefusedRetry = old })

	srv := redistest.StandaloneWith(t, nil)
	srv.SetUser(t, "nosub", "pw", strings.Replace(ACLRules("sec"), "+subscribe", "", 1))
	st := openT(t, Config{Address: []string{srv.Addr()}, Username: "nosub", Password: "pw", KeyPrefix: "sec"})
	type refusal struct {
		err   string
		first bool
	}
	refusals := make(chan refusal, 1000)
	st.OnWatchRefused(func(p store.PermanentError, first bool) {
		refusals <- refusal{p.Error() + " / " + p.Remedy(), first}
	})
	notified := make(chan struct{}, 100)
	stop := st.Watch("c", func() { notified <- struct{}{} })
	defer stop()

	// Three refusals: the first is the one to report, and it names the command.
	for i := range 3 {
		r := <-refusals
		if r.first != (i == 0) {
			t.Fatalf("refusal %d: first=%v", i, r.first)
		}
		if !strings.Contains(r.err, "NOPERM") || !strings.Contains(r.err, "subscribe") || !strings.Contains(r.err, "ACL") {
			t.Fatalf("refusal %d: %q, want NOPERM naming subscribe, with the remedy", i, r.err)
		}
	}
	select {
	case <-notified:
		t.Fatal("notified while the subscription is refused")
	default:
	}

	// The operator grants SUBSCRIBE: the next try subscribes (a notification), and a published
	// change arrives.
	if _, err := srv.Do("ACL", "SETUSER", "nosub", "+subscribe"); err != nil {
		t.Fatal(err)
	}
	waitNotified := func(what string) {
		t.Helper()
		select {
		case <-notified:
		case <-time.After(10 * time.Second):
			t.Fatalf("no notification after %s", what)
		}
	}
	waitNotified("the grant")
	for len(refusals) > 0 { // refusals of tries made before the grant
		<-refusals
	}
	if _, err := srv.Do("PUBLISH", "sec:{c}:events", "7"); err != nil {
		t.Fatal(err)
	}
	waitNotified("a PUBLISH")

	// The channel pattern revoked: Redis drops the subscriber, the new subscription is
	// refused, and that is a new episode, reported again.
	if _, err := srv.Do("ACL", "SETUSER", "nosub", "resetchannels"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-refusals:
		if !r.first || !strings.Contains(r.err, "NOPERM") {
			t.Fatalf("refusal after the revocation: %+v, want a first one", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked channel was not reported")
	}
}

// A refused connection is a permanent error on every call, the pipelined report included:
// go-redis does not stamp a pipeline's commands with an error of the connection's handshake,
// which left the report with an empty reply ("unexpected type=<nil>") instead of WRONGPASS.
func TestProbeReportWrongPassword(t *testing.T) {
	srv := redistest.StandaloneWith(t, nil)
	aclUser(t, "right", "sec", srv)
	st := openT(t, Config{Address: []string{srv.Addr()}, Username: "rl", Password: "wrong", KeyPrefix: "sec"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := st.Report(ctx, store.Report{
		Cluster: store.ClusterPolicy{ID: "c"}, Instance: "i",
		Apps: []store.AppReport{{App: "a", Requests: 1, Cost: 1}},
	})
	wantPermanent(t, err, KindAuth, "WRONGPASS")
}

// Evicting names a Redis that may evict the Store's keys (maxmemory with any policy but
// noeviction), and says nothing for one that may not, or when INFO is not allowed: the
// least-privilege user is asked first and leaves no denial in the ACL log.
func TestEvicting(t *testing.T) {
	addr, srv := redistest.Standalone(t)
	s := openT(t, Config{Address: []string{addr}})
	evicting := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return s.Evicting(ctx)
	}
	set := func(maxmemory, policy string) {
		t.Helper()
		for _, kv := range [][2]string{{"maxmemory", maxmemory}, {"maxmemory-policy", policy}} {
			if _, err := srv.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct{ maxmemory, policy, want string }{
		{"0", "allkeys-lru", ""},
		{"100mb", "noeviction", ""},
		{"100mb", "allkeys-lru", "maxmemory 104857600 bytes with maxmemory-policy allkeys-lru"},
		{"100mb", "volatile-ttl", "maxmemory 104857600 bytes with maxmemory-policy volatile-ttl"},
	} {
		set(tc.maxmemory, tc.policy)
		if got := evicting(); got != tc.want {
			t.Errorf("maxmemory %s, %s: Evicting = %q, want %q", tc.maxmemory, tc.policy, got, tc.want)
		}
	}
	// allkeys-lru is still set: the least-privilege user may not read INFO and is not told.
	aclUser(t, "pw", "", srv)
	limited := openT(t, Config{Address: []string{addr}, Username: "rl", Password: "pw"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if got := limited.Evicting(ctx); got != "" {
		t.Errorf("least-privilege user: Evicting = %q, want \"\" (INFO not allowed)", got)
	}
	noACLDenials(t, srv)
}
