package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// The start-up probe (docs/security.md, "Permanent errors"): `caddy validate` fails on a
// configuration Redis refuses, naming the cause and the remedy; a running Caddy logs it once at
// ERROR and serves under the rescue limits until the operator fixes it.

const probePrefix = "probe"

// probeSite is a site with one cluster on Redis: block is the `redis` block's lines (without
// key_prefix). App svc has a quota far above what the tests send, app tiny a burst of 2.
func probeSite(block string) string {
	return fmt.Sprintf(`	rate_limit {
		key {http.request.header.X-App-Id}
		unknown_app reject
		app svc {
			guaranteed 1000
			burst 1000
		}
		app tiny {
			guaranteed 0.01
			burst 2
		}
		redis {
			%s
			key_prefix %s
		}
	}
	respond "ok" 200`, block, probePrefix)
}

// aclUserE2E creates (or replaces) the Redis ACL user name with password pw and the
// least-privilege rules of the plugin's key prefix, less the commands in drop ("+subscribe").
func aclUserE2E(t *testing.T, srv *redistest.Server, name, pw string, drop ...string) {
	t.Helper()
	rules := " " + redislua.ACLRules(probePrefix) + " "
	for _, d := range drop {
		if !strings.Contains(rules, " "+d+" ") {
			t.Fatalf("ACL rules %q have no %q", rules, d)
		}
		rules = strings.Replace(rules, " "+d+" ", " ", 1)
	}
	srv.SetUser(t, name, pw, rules)
}

// wantRefused checks a failed `caddy validate`: a non-zero exit, every one of want in the
// output, the remedy, and never the password.
func wantRefused(t *testing.T, out string, err error, password string, want ...string) {
	t.Helper()
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("caddy validate: exit %v, want a non-zero exit\n%s", err, out)
	}
	if strings.Contains(out, "Valid configuration") {
		t.Fatalf("caddy validate says valid:\n%s", out)
	}
	for _, w := range append(want, "Redis refuses this configuration", "remedy: ") {
		if !strings.Contains(out, w) {
			t.Fatalf("caddy validate output lacks %q:\n%s", w, out)
		}
	}
	if password != "" && strings.Contains(out, password) {
		t.Fatalf("caddy validate printed the password:\n%s", out)
	}
	t.Logf("caddy validate: %s", lastLines(out, 1))
}

// `caddy validate` fails on each configuration Redis refuses, and says why and what to do.
func TestValidateRefused(t *testing.T) {
	requireCaddy(t)
	srv := redistest.StandaloneWith(t, nil)
	aclUserE2E(t, srv, "gw", "right-pw-31f")
	aclUserE2E(t, srv, "noevalsha", "pw-noevalsha", "+evalsha")
	aclUserE2E(t, srv, "nosub", "pw-nosub", "+subscribe")
	plain := "address " + srv.Addr()

	t.Run("the least-privilege user is valid", func(t *testing.T) {
		out, err := caddyValidate(t, probeSite(plain+"\n\t\t\tusername gw\n\t\t\tpassword right-pw-31f"))
		if err != nil || !strings.Contains(out, "Valid configuration") {
			t.Fatalf("caddy validate: %v\n%s", err, out)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		const pw = "Wr0ng-pw-Validate-8d2e"
		out, err := caddyValidate(t, probeSite(plain+"\n\t\t\tusername gw\n\t\t\tpassword "+pw))
		wantRefused(t, out, err, pw, "WRONGPASS", "check the redis block's username and password")
	})
	t.Run("wrong password from the environment", func(t *testing.T) {
		const pw = "Wr0ng-pw-Env-5b71"
		out, err := caddyValidate(t, probeSite(plain+"\n\t\t\tusername gw\n\t\t\tpassword {env.TB_PROBE_PW}"), "TB_PROBE_PW="+pw)
		wantRefused(t, out, err, pw, "WRONGPASS", "{env.REDIS_PASSWORD} must be set")
	})
	t.Run("no EVALSHA", func(t *testing.T) {
		out, err := caddyValidate(t, probeSite(plain+"\n\t\t\tusername noevalsha\n\t\t\tpassword pw-noevalsha"))
		wantRefused(t, out, err, "pw-noevalsha", "the Redis user may not run evalsha ", "grant the Redis ACL user")
	})
	t.Run("no SUBSCRIBE", func(t *testing.T) {
		out, err := caddyValidate(t, probeSite(plain+"\n\t\t\tusername nosub\n\t\t\tpassword pw-nosub"))
		wantRefused(t, out, err, "pw-nosub", "the Redis user may not run subscribe", "channel probe:{default}:events")
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		p := redistest.NewTLS(t, t.TempDir())
		tsrv := redistest.StandaloneWith(t, p)
		aclUserE2E(t, tsrv, "gw", "tls-pw-9a0c")
		// tls without tls_trust_pool: the system's roots, which do not hold the test's CA.
		out, err := caddyValidate(t, probeSite("address "+tsrv.TLSAddr()+"\n\t\t\ttls\n\t\t\tusername gw\n\t\t\tpassword tls-pw-9a0c"))
		wantRefused(t, out, err, "tls-pw-9a0c", "certificate signed by unknown authority", "tls_trust_pool")
	})
}

// logEntry is one line of Caddy's JSON log.
type logEntry map[string]any

func (e logEntry) str(k string) string { s, _ := e[k].(string); return s }

// logEntries reads the gateway's log: every line is JSON (plainLines checks it).
func logEntries(t *testing.T, g *gateway) []logEntry {
	t.Helper()
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []logEntry
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e logEntry
		if json.Unmarshal([]byte(line), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// errorLines returns the ERROR lines of the gateway's log.
func errorLines(t *testing.T, g *gateway) []logEntry {
	var out []logEntry
	for _, e := range logEntries(t, g) {
		if e.str("level") == "error" {
			out = append(out, e)
		}
	}
	return out
}

// waitLog waits until the gateway has logged a line whose message contains msg.
func waitLog(t *testing.T, g *gateway, msg string, timeout time.Duration) logEntry {
	t.Helper()
	var found logEntry
	waitUntil(t, fmt.Sprintf("gateway %s logs %q", g.name, msg), timeout, func() bool {
		for _, e := range logEntries(t, g) {
			if strings.Contains(e.str("msg"), msg) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// A Caddy started with a wrong Redis password logs it once at ERROR with cause and remedy,
// serves under the rescue limits, and recovers when the operator gives the user that password.
func TestProbeStartupWrongPassword(t *testing.T) {
	requireCaddy(t)
	srv := redistest.StandaloneWith(t, nil)
	aclUserE2E(t, srv, "gw", "right-pw-4c1d")
	const pw = "Wr0ng-pw-Startup-e6f3"
	g := startGateway(t, "g", probeSite("address "+srv.Addr()+"\n\t\t\tusername gw\n\t\t\tpassword "+pw))

	// fail_open at once, named at ERROR by the probe.
	g.waitMetric(10*time.Second, func(v float64) bool { return v == 3 }, "caddy_rate_limit_degradation_level")
	e := waitLog(t, g, "refuses this instance's configuration", 10*time.Second)
	if !strings.Contains(e.str("cause"), "WRONGPASS") || !strings.Contains(e.str("remedy"), "username and password") {
		t.Fatalf("the ERROR line: %v", e)
	}

	// The rescue limits serve an app within its quota, and refuse tiny beyond its burst.
	client := newClient(t, 5*time.Second, 4)
	for i := range 20 {
		resp, body, err := get(client, g.base, "/", "svc")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("svc request %d under fail_open: %v %v %q", i, err, resp, body)
		}
	}
	var codes []int
	for range 4 {
		resp, _, err := get(client, g.base, "/", "tiny")
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != http.StatusOK || codes[3] != http.StatusTooManyRequests || slices.ContainsFunc(codes, func(c int) bool { return c >= 500 }) {
		t.Fatalf("tiny under fail_open: %v, want its rescue burst then 429, no 5xx", codes)
	}

	// The limiter keeps probing (each a failed call, counted), and says nothing more.
	g.waitMetric(15*time.Second, func(v float64) bool { return v >= 3 }, "caddy_rate_limit_store_errors_total", `op="report"`)
	if v, _, err := g.metric("caddy_rate_limit_store_errors_total", `op="probe"`); err != nil || v != 1 {
		t.Fatalf("store_errors_total{op=probe} %v (%v), want 1", v, err)
	}
	if errs := errorLines(t, g); len(errs) != 1 {
		t.Fatalf("%d ERROR lines, want 1: %v", len(errs), errs)
	}

	// The operator gives the user this password: the next probe succeeds.
	if _, err := srv.Do("ACL", "SETUSER", "gw", ">"+pw); err != nil {
		t.Fatal(err)
	}
	g.waitMetric(15*time.Second, func(v float64) bool { return v == 0 }, "caddy_rate_limit_degradation_level")
	waitLog(t, g, "Store recovered, leaving fail_open", 15*time.Second) // logged once the Store has answered for 5 s
	if resp, body, err := get(client, g.base, "/", "svc"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("svc after the fix: %v %v %q", err, resp, body)
	}
	if errs := errorLines(t, g); len(errs) != 1 {
		t.Fatalf("%d ERROR lines, want 1: %v", len(errs), errs)
	}
	plainLines(t, g)
}

// A user that may run the scripts but not subscribe to the cluster's channel: the limiter
// works (level normal), the missing permission is named once at ERROR, however often the
// subscription is tried again.
func TestProbeStartupNoSubscribe(t *testing.T) {
	requireCaddy(t)
	srv := redistest.StandaloneWith(t, nil)
	aclUserE2E(t, srv, "nosub", "pw-nosub-77a2", "+subscribe")
	g := startGateway(t, "g", probeSite("address "+srv.Addr()+"\n\t\t\tusername nosub\n\t\t\tpassword pw-nosub-77a2"))

	client := newClient(t, 5*time.Second, 2)
	if resp, body, err := get(client, g.base, "/", "svc"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("svc: %v %v %q", err, resp, body)
	}
	e := waitLog(t, g, "refuses this instance's configuration", 10*time.Second)
	if !strings.Contains(e.str("cause"), "may not run subscribe") || !strings.Contains(e.str("remedy"), "&<key_prefix>:*") {
		t.Fatalf("the ERROR line: %v", e)
	}
	// The subscription was refused twice (it starts after the first report, then is tried
	// again every 5 s); the refusals are counted, not logged again.
	g.waitMetric(20*time.Second, func(v float64) bool { return v >= 2 }, "caddy_rate_limit_store_errors_total", `op="watch"`)
	if errs := errorLines(t, g); len(errs) != 1 {
		t.Fatalf("%d ERROR lines, want 1: %v", len(errs), errs)
	}
	if v, _, err := g.metric("caddy_rate_limit_degradation_level"); err != nil || v != 0 {
		t.Fatalf("degradation level %v (%v), want 0: only the notifications are missing", v, err)
	}
	plainLines(t, g)
}

// A reload that connects to a Redis refusing its credentials is refused, naming the cause, and
// the running configuration keeps serving with its Store. (Accepted, it replaced a working
// limiter by the rescue limits: fail_open, each gateway admitting its own quota.)
func TestProbeReloadRefusesWrongPassword(t *testing.T) {
	requireCaddy(t)
	srv := redistest.StandaloneWith(t, nil)
	aclUserE2E(t, srv, "gw", "right-pw-7d21")
	g := startGateway(t, "g", probeSite("address "+srv.Addr()+"\n\t\t\tusername gw\n\t\t\tpassword right-pw-7d21"))
	client := newClient(t, 5*time.Second, 2)
	if resp, body, err := get(client, g.base, "/", "svc"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("svc before the reload: %v %v %q", err, resp, body)
	}
	const pw = "Wr0ng-pw-Refused-51aa"
	out, err := g.tryReload(probeSite("address " + srv.Addr() + "\n\t\t\tusername gw\n\t\t\tpassword " + pw))
	if err == nil {
		t.Fatalf("a reload with a password Redis refuses was accepted:\n%s", out)
	}
	if !strings.Contains(out, "Redis refuses this configuration") || strings.Contains(out, pw) {
		t.Fatalf("caddy reload's answer does not name the refusal, or shows the password:\n%s", out)
	}
	if resp, body, err := get(client, g.base, "/", "svc"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("svc after the refused reload: %v %v %q", err, resp, body)
	}
	if v, _, err := g.metric("caddy_rate_limit_degradation_level"); err != nil || v != 0 {
		t.Fatalf("degradation level %v (%v) after the refused reload, want 0: the running config keeps its Store", v, err)
	}
	// One ERROR: Caddy's, of the refused load; none from the running limiter.
	if errs := errorLines(t, g); len(errs) != 1 || errs[0]["logger"] != "admin.api" {
		t.Fatalf("ERROR lines %v, want only the admin API's refusal of the load", errs)
	}
}

// The other fix: a reload with the right password. The credentials are part of what makes the
// cluster's state, so the reload gets a state with a client that uses them (the old state's
// client kept the wrong password), and the limiter leaves the rescue limits.
func TestProbeReloadFixesPassword(t *testing.T) {
	requireCaddy(t)
	srv := redistest.StandaloneWith(t, nil)
	aclUserE2E(t, srv, "gw", "right-pw-0b5e")
	const pw = "Wr0ng-pw-Reload-93c4"
	g := startGateway(t, "g", probeSite("address "+srv.Addr()+"\n\t\t\tusername gw\n\t\t\tpassword "+pw))
	g.waitMetric(10*time.Second, func(v float64) bool { return v == 3 }, "caddy_rate_limit_degradation_level")
	waitLog(t, g, "refuses this instance's configuration", 10*time.Second)

	g.reload(probeSite("address " + srv.Addr() + "\n\t\t\tusername gw\n\t\t\tpassword right-pw-0b5e"))
	g.waitMetric(10*time.Second, func(v float64) bool { return v == 0 }, "caddy_rate_limit_degradation_level")
	client := newClient(t, 5*time.Second, 2)
	if resp, body, err := get(client, g.base, "/", "svc"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("svc after the reload: %v %v %q", err, resp, body)
	}
	// The request reached Redis with the new credentials.
	waitUntil(t, "the app's L2 record in Redis", 10*time.Second, func() bool {
		n, err := srv.Do("EXISTS", probePrefix+":{default/svc}:l2")
		return err == nil && n == int64(1)
	})
	if errs := errorLines(t, g); len(errs) != 1 {
		t.Fatalf("%d ERROR lines, want the one of the wrong password: %v", len(errs), errs)
	}
}
