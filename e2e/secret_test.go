package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// secretPassword is the Redis password of TestSecretNeverLeaves: distinctive, so that any
// occurrence in what Caddy shows is this test's secret and nothing else.
const secretPassword = "Zq7-s3cr3t-NEVER-shown-41kPx"

// secretSite has three clusters whose Redis password is {env.TB_SECRET_PW}: "auth" and "url"
// on a Redis that has another password for the user (through password, and through the
// credentials of a url), "tlsc" on a TLS Redis whose CA Caddy does not trust.
func secretSite(plain, tlsAddr string) string {
	cluster := func(path, id, redis string) string {
		return fmt.Sprintf(`		rate_limit %s {
			cluster %s
			key {http.request.header.X-App-Id}
			unknown_app reject
			app svc {
				guaranteed 1000
				burst 1000
			}
			app tiny {
				guaranteed 0.01
				burst 1
			}
			redis {
				%s
				key_prefix secret
			}
		}
`, path, id, redis)
	}
	return "\troute {\n" +
		cluster("/auth/*", "auth", "address "+plain+"\n\t\t\t\tusername gw\n\t\t\t\tpassword {env.TB_SECRET_PW}") +
		cluster("/url/*", "url", "url redis://gw:{env.TB_SECRET_PW}@"+plain+"/0") +
		cluster("/tls/*", "tlsc", "address "+tlsAddr+"\n\t\t\t\ttls\n\t\t\t\tusername gw\n\t\t\t\tpassword {env.TB_SECRET_PW}") +
		"\t\trespond \"ok\" 200\n\t}"
}

// The Redis password, given through {env.*}, appears nowhere Caddy shows anything, while Redis
// refuses it (WRONGPASS, through password and through a url) and while the TLS handshake fails
// (an untrusted CA): not in `caddy validate`'s output, Caddy's log at DEBUG (which includes the
// emitted events and go-redis' own lines), any admin route under /rate_limit/ (and a refused
// override change, whose error comes from the Store), /config/ (which keeps the placeholder)
// or /metrics.
func TestSecretNeverLeaves(t *testing.T) {
	requireCaddy(t)
	srv := redistest.StandaloneWith(t, nil)
	aclUserE2E(t, srv, "gw", "the-right-one")
	p := redistest.NewTLS(t, t.TempDir())
	tsrv := redistest.StandaloneWith(t, p)
	aclUserE2E(t, tsrv, "gw", secretPassword) // right password, wrong trust
	t.Setenv("TB_SECRET_PW", secretPassword)
	site := secretSite(srv.Addr(), tsrv.TLSAddr())

	var shown []string // everything Caddy showed, by where
	show := func(where, s string) { shown = append(shown, where+":\n"+s) }

	out, err := caddyValidate(t, site)
	if err == nil || !strings.Contains(out, "WRONGPASS") {
		t.Fatalf("caddy validate: %v, want WRONGPASS\n%s", err, out)
	}
	show("caddy validate", out)

	g := startGatewayGlobal(t, "g", site, "\tdebug")
	clusters := []string{"auth", "url", "tlsc"}
	for _, c := range clusters {
		g.waitMetric(10*time.Second, func(v float64) bool { return v == 3 }, "caddy_rate_limit_degradation_level", `cluster="`+c+`"`)
	}
	client := newClient(t, 5*time.Second, 4)
	for _, path := range []string{"/auth/x", "/url/x", "/tls/x"} {
		for _, app := range []string{"svc", "tiny", "tiny", "tiny"} { // tiny's rejections emit events
			resp, body, err := get(client, g.base, path, app)
			if err != nil || resp.StatusCode >= 500 {
				t.Fatalf("%s %s: %v %v %q", path, app, err, resp, body)
			}
			show("response to "+path, fmt.Sprint(resp.Header)+body)
		}
	}

	for _, c := range clusters {
		for _, route := range []string{"", "apps", "apps/svc", "apps/tiny", "connections", "emergency", "history"} {
			status, _, body := g.adminJSON(http.MethodGet, "/rate_limit/"+route+"?cluster="+c, nil)
			if status != http.StatusOK {
				t.Fatalf("GET /rate_limit/%s?cluster=%s: %d %s", route, c, status, body)
			}
			show("GET /rate_limit/"+route+"?cluster="+c, body)
		}
		status, _, body := g.adminJSON(http.MethodGet, "/rate_limit/clusters/"+c, nil)
		if status != http.StatusOK {
			t.Fatalf("GET /rate_limit/clusters/%s: %d %s", c, status, body)
		}
		show("GET /rate_limit/clusters/"+c, body)
		// A change that needs the Store: refused, with the Store's error in the answer.
		status, body = g.adminDo(http.MethodPut, "/rate_limit/apps/svc?cluster="+c, "application/json", `{"guaranteed": 5}`)
		if status < 500 {
			t.Fatalf("PUT /rate_limit/apps/svc?cluster=%s while Redis refuses: %d %s", c, status, body)
		}
		show("PUT /rate_limit/apps/svc?cluster="+c, body)
		show("GET /rate_limit/stream?cluster="+c, readStreamEvent(t, g, c))
	}
	status, _, body := g.adminJSON(http.MethodGet, "/rate_limit/", nil) // several clusters: a 400 naming them
	show("GET /rate_limit/", fmt.Sprint(status, body))
	status, _, body = g.adminJSON(http.MethodGet, "/config/", nil)
	if status != http.StatusOK || !strings.Contains(body, "{env.TB_SECRET_PW}") {
		t.Fatalf("GET /config/: %d, want the placeholder:\n%s", status, body)
	}
	show("GET /config/", body)
	status, _, body = g.adminJSON(http.MethodGet, "/metrics", nil)
	if status != http.StatusOK || !strings.Contains(body, "caddy_rate_limit_store_errors_total") {
		t.Fatalf("GET /metrics: %d\n%s", status, lastLines(body, 20))
	}
	show("GET /metrics", body)

	// The log, after shutdown (the handlers' cleanup logs too): the causes were logged, and
	// the events were observable.
	g.stop()
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	show("log", log)
	for _, want := range []string{"WRONGPASS", "certificate signed by unknown authority", `"msg":"event"`, `"name":"rate_limit_exceeded"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q", want)
		}
	}

	for _, s := range shown {
		if i := strings.Index(s, secretPassword); i >= 0 {
			where, _, _ := strings.Cut(s, ":\n")
			t.Errorf("the password appears in %s: …%s…", where, s[max(0, i-200):min(len(s), i+len(secretPassword)+50)])
		}
	}
	t.Logf("checked %d outputs (%d bytes of log) for the password", len(shown), len(log))
}

// readStreamEvent reads the first event of GET /rate_limit/stream?cluster=c.
func readStreamEvent(t *testing.T, g *gateway, c string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.admin+"/rate_limit/stream?cluster="+c, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /rate_limit/stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /rate_limit/stream?cluster=%s: %s %s", c, resp.Status, b)
	}
	var event strings.Builder
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		event.WriteString(line)
		if err != nil {
			t.Fatalf("stream of %s: %v after %q", c, err, event.String())
		}
		if line == "\n" && strings.Contains(event.String(), "data: ") {
			return event.String()
		}
	}
}
