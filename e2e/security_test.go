package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// secretEnv is the environment variable the tests below put the Redis password in, through
// {env.…} in the Caddyfile, as an operator would.
const secretEnv = "TIERBUCKET_E2E_REDIS_PASSWORD"

// aclServer starts a standalone Redis (TLS with p, if not nil) with the user "gw" allowed exactly
// the documented ACL (redislua.ACLRules) under prefix, with password pw.
func aclServer(t *testing.T, p *redistest.TLS, prefix, pw string) *redistest.Server {
	t.Helper()
	s := redistest.StandaloneWith(t, p)
	s.SetUser(t, "gw", pw, redislua.ACLRules(prefix))
	return s
}

// securitySite is a site whose limiter uses Redis at addr as user gw with the password from
// secretEnv, with the extra lines of the redis block.
func securitySite(addr, prefix, redisExtra string) string {
	return fmt.Sprintf(`	rate_limit {
		cluster sec
		key {http.request.header.X-App-Id}
		app a {
			guaranteed 100
			burst 100
		}
		redis {
			address %s
			username gw
			password {env.%s}
			key_prefix %s
%s
		}
	}
	respond "ok" 200`, addr, secretEnv, prefix, redisExtra)
}

// validate runs `caddy validate` on a gateway config with site, and returns its output.
func validate(t *testing.T, site string) (string, error) {
	t.Helper()
	requireCaddy(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(gatewayConfig(testnet.FreePort(t), testnet.FreePort(t), site)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBin, "validate", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestValidateReportsRefusedConfig: `caddy validate` fails on a configuration Redis refuses,
// naming the cause and the remedy (never the password), and passes a configuration Redis
// accepts. (A Redis that does not answer is not a configuration error:
// TestValidateDoesNotDialRedis.)
func TestValidateReportsRefusedConfig(t *testing.T) {
	const pw = "right-Passw0rd-e2e"
	s := aclServer(t, nil, "vsec", pw)
	// Users one permission short of the documented ACL.
	s.SetUser(t, "noeval", pw, strings.ReplaceAll(redislua.ACLRules("vsec"), "+evalsha", ""))
	s.SetUser(t, "nosub", pw, strings.ReplaceAll(redislua.ACLRules("vsec"), "+subscribe", ""))
	p := redistest.NewTLS(t, t.TempDir())
	tlsSrv := aclServer(t, p, "vsec", pw)

	cases := []struct {
		name, password, site string
		ok                   bool
		want                 []string // in the output
	}{
		{"accepted", pw, securitySite(s.Addr(), "vsec", ""), true, []string{"Valid configuration"}},
		{"wrong password", "wrong-Passw0rd-e2e", securitySite(s.Addr(), "vsec", ""), false,
			[]string{"Redis refuses this configuration", "remedy", "password"}},
		{"no evalsha", pw, strings.Replace(securitySite(s.Addr(), "vsec", ""), "username gw", "username noeval", 1), false,
			[]string{"may not run evalsha", "remedy"}},
		{"no subscribe", pw, strings.Replace(securitySite(s.Addr(), "vsec", ""), "username gw", "username nosub", 1), false,
			[]string{"may not run subscribe", "remedy"}},
		{"untrusted certificate", pw, securitySite(tlsSrv.TLSAddr(), "vsec", "\t\t\ttls"), false,
			[]string{"certificate", "tls_trust_pool"}},
		{"trusted certificate", pw, securitySite(tlsSrv.TLSAddr(), "vsec", "\t\t\ttls_trust_pool file "+p.CAFile), true,
			[]string{"Valid configuration"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(secretEnv, c.password)
			out, err := validate(t, c.site)
			if c.ok != (err == nil) {
				t.Fatalf("caddy validate: %v, want success %v:\n%s", err, c.ok, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("the output does not say %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, c.password) {
				t.Errorf("the output contains the password:\n%s", out)
			}
		})
	}
}

// TestRefusedConfigAtStartAndRecovery: a Caddy started with a password Redis refuses logs one
// ERROR with the cause and the remedy, serves within the rescue limits meanwhile, and recovers
// (logged) once the operator fixes the user in Redis. Neither this gateway nor one refused for
// an untrusted certificate lets the password out: not in the log, the admin API or the metrics.
func TestRefusedConfigAtStartAndRecovery(t *testing.T) {
	const secret = "s3cret-Never-Shown-7d1f"
	t.Setenv(secretEnv, secret)
	s := aclServer(t, nil, "rsec", "the-right-one")
	g := startGateway(t, "refused", securitySite(s.Addr(), "rsec", ""))
	p := redistest.NewTLS(t, t.TempDir())
	tlsSrv := aclServer(t, p, "rsec", secret)
	gTLS := startGateway(t, "untrusted", securitySite(tlsSrv.TLSAddr(), "rsec", "\t\t\ttls"))

	for _, gw := range []*gateway{g, gTLS} {
		gw.waitMetric(10*time.Second, func(v float64) bool { return v == 3 }, "caddy_rate_limit_degradation_level", `cluster="sec"`)
	}
	client := newClient(t, 5*time.Second, 4)
	for i := range 20 { // well within the rescue bucket (the app's burst, alone)
		resp, body, err := get(client, g.base, "/b/o", "a")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d under fail_open: %v %v %q", i, err, resp, body)
		}
	}
	refusedLines := func(gw *gateway) []string {
		var out []string
		for _, l := range logLines(t, gw) {
			if strings.Contains(l, `"level":"error"`) && strings.Contains(l, "refuses this instance's configuration") {
				out = append(out, l)
			}
		}
		return out
	}
	if ls := refusedLines(g); len(ls) != 1 || !strings.Contains(ls[0], "WRONGPASS") || !strings.Contains(ls[0], "remedy") {
		t.Fatalf("want exactly one ERROR naming WRONGPASS and the remedy, got %d:\n%s", len(ls), strings.Join(ls, "\n"))
	}
	if ls := refusedLines(gTLS); len(ls) != 1 || !strings.Contains(ls[0], "certificate") {
		t.Fatalf("want exactly one ERROR naming the certificate, got %d:\n%s", len(ls), strings.Join(ls, "\n"))
	}

	// The secret appears nowhere a client or an operator can read.
	for _, gw := range []*gateway{g, gTLS} {
		var seen []string
		for _, path := range []string{"/rate_limit/", "/rate_limit/apps", "/rate_limit/apps/a", "/rate_limit/clusters/sec",
			"/rate_limit/connections", "/rate_limit/emergency", "/rate_limit/history?seconds=60", "/config/", "/metrics"} {
			seen = append(seen, adminBody(t, gw, path))
		}
		seen = append(seen, logLines(t, gw)...)
		for _, text := range seen {
			if strings.Contains(text, secret) {
				t.Fatalf("gateway %s lets the password out: %s", gw.name, text)
			}
		}
		if cfg := adminBody(t, gw, "/config/"); !strings.Contains(cfg, "{env."+secretEnv+"}") {
			t.Errorf("gateway %s: /config/ does not keep the placeholder:\n%s", gw.name, cfg)
		}
	}

	// The operator fixes the user: the limiter recovers and says so.
	s.SetUser(t, "gw", secret, redislua.ACLRules("rsec"))
	g.waitMetric(10*time.Second, func(v float64) bool { return v == 0 }, "caddy_rate_limit_degradation_level", `cluster="sec"`)
	recovered := false
	for _, l := range logLines(t, g) {
		recovered = recovered || strings.Contains(l, "Store recovered, leaving fail_open")
	}
	if !recovered {
		t.Error("no recovery line in the log")
	}
	if ls := refusedLines(g); len(ls) != 1 {
		t.Errorf("%d ERROR lines after recovery, want the one of the episode", len(ls))
	}
}

// logLines returns the gateway's log so far, one entry per line.
func logLines(t *testing.T, g *gateway) []string {
	t.Helper()
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// adminBody GETs path from the gateway's admin endpoint (one SSE read for the stream).
func adminBody(t *testing.T, g *gateway, path string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return string(b)
}
