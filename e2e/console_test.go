package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/testenv"
)

// consoleSite: two apps with room for the console test's steady traffic (alpha 2 req/s, beta
// 10 req/s) and a cluster capacity, so that every chart has something to show; the console is
// also served on the site, read-only, at /ops/ (outside the rate-limited routes).
const consoleSite = `	handle /ops/* {
		rate_limit_console /ops
	}
	handle {
		rate_limit {
			cluster console-e2e
			key {http.request.header.X-App-Id}
			unknown_app shared
			capacity 1000
			app alpha {
				guaranteed 20
				burst 40
				priority 1
			}
			app beta {
				guaranteed 50
				burst 100
				priority 3
			}
		}
		respond "ok"
	}`

// manyConfigured and manyCreated are the apps of the many-tenants gateway: from its Caddyfile,
// and created through the admin API.
const manyConfigured, manyCreated = 19_000, 1_000

// manySite is a gateway with manyConfigured apps (app00000…), unknown apps isolated, and the
// console served on the site at /ops/ with changes allowed.
func manySite() string {
	var b strings.Builder
	b.WriteString("\thandle /ops/* {\n\t\trate_limit_console /ops {\n\t\t\tallow_changes\n\t\t}\n\t}\n")
	b.WriteString("\thandle {\n\t\trate_limit {\n\t\t\tcluster many-e2e\n\t\t\tkey {http.request.header.X-App-Id}\n\t\t\tunknown_app isolated\n")
	for i := range manyConfigured {
		fmt.Fprintf(&b, "\t\t\tapp app%05d {\n\t\t\t\tguaranteed 20\n\t\t\t\tburst 100\n\t\t\t}\n", i)
	}
	b.WriteString("\t\t}\n\t\trespond \"ok\"\n\t}")
	return b.String()
}

// startMany starts the many-tenants gateway and creates manyCreated apps (api0000…) through its
// admin API.
func startMany(t *testing.T) *gateway {
	t.Helper()
	g := startGatewayAdmin(t, "console-many", manySite(), "")
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range manyCreated {
		req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/rate_limit/apps/api%04d", g.admin, i),
			strings.NewReader(`{"guaranteed": 2, "burst": 20}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if body := drain(resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT api%04d: %d %s", i, resp.StatusCode, body)
		}
	}
	return g
}

// consoleAdmin lets a browser open the console by its address: Caddy's admin endpoint checks
// the origin of every request that has a Sec-Fetch-Mode header, and a navigation typed into the
// address bar has neither Origin nor Referer, so it is refused unless "" is an allowed origin
// (docs/console.md).
const consoleAdmin = "\t\torigins 127.0.0.1:{port} localhost:{port} \"\""

// TestConsoleBrowser runs the console's browser tests (console/tests/e2e, Playwright on the
// system's Chromium) against real Caddies with traffic: the dashboard shows the apps and
// non-empty charts, an edit of alpha's quota through the form changes what the limiter
// enforces, and the emergency is activated and deactivated through the UI; the console served
// on a site is read-only (a change refused with 403) unless allow_changes; and with 20 000 apps
// the Apps view shows a bounded page at once and finds an app by id. With
// CONSOLE_SCREENSHOTS=<dir> it also writes the screenshots of docs/console/.
func TestConsoleBrowser(t *testing.T) {
	requireCaddy(t)
	dir, err := filepath.Abs("../console")
	if err != nil {
		t.Fatal(err)
	}
	playwright := filepath.Join(dir, "node_modules", ".bin", "playwright")
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	for _, need := range []string{playwright, chromium} {
		if _, err := os.Stat(need); err != nil {
			testenv.Missing(t, need+" is missing: run scripts/test.sh, or apt-get install chromium and npm ci in console/")
		}
	}

	g := startGatewayAdmin(t, "console", consoleSite, consoleAdmin)
	many := startMany(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, tr := range []struct {
		g     *gateway
		app   string
		every time.Duration
	}{
		{g, "alpha", 500 * time.Millisecond},
		{g, "beta", 100 * time.Millisecond},
		{many, "app12345", 100 * time.Millisecond},
		{many, "api0777", 200 * time.Millisecond},
		{many, "stranger-1", 250 * time.Millisecond}, // an isolated unknown tenant
	} {
		wg.Add(1)
		go func() { // steady traffic until the test ends (bounded by the test's own duration)
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			tick := time.NewTicker(tr.every)
			defer tick.Stop()
			for {
				req, _ := http.NewRequestWithContext(ctx, "GET", tr.g.base+"/traffic", nil)
				req.Header.Set("X-App-Id", tr.app)
				if resp, err := client.Do(req); err == nil {
					drain(resp)
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}

	run, stop := context.WithTimeout(context.Background(), 6*time.Minute)
	defer stop()
	cmd := exec.CommandContext(run, playwright, "test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"CONSOLE_URL="+g.admin+"/rate_limit/ui/",
		"SITE_URL="+g.base,
		"SITE_CONSOLE_URL="+g.base+"/ops/ui/",
		"MANY_CONSOLE_URL="+many.base+"/ops/ui/",
		"MANY_ADMIN_URL="+many.admin,
		"CHROMIUM="+chromium,
	)
	if shots := os.Getenv("CONSOLE_SCREENSHOTS"); shots != "" {
		abs, err := filepath.Abs(shots)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "SCREENSHOTS_DIR="+abs)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("playwright:\n%s", out)
	if err != nil {
		t.Fatalf("the console's browser tests failed: %v", err)
	}
}

// TestSiteStreamDoesNotHoldReloadOrShutdown: with a console's stream open on a site
// (rate_limit_console), a reload ends it at once and logs no ERROR, and SIGTERM ends Caddy at
// once with exit code 0.
func TestSiteStreamDoesNotHoldReloadOrShutdown(t *testing.T) {
	site := strings.Replace(consoleSite, "console-e2e", "e2e-site-stream", 1)
	g := startGateway(t, "site-stream", site)
	ended := openStreamAt(t, g.base+"/ops/stream")
	g.reload(site + "\n\theader X-Reloaded yes")
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		t.Fatal("the site's stream was still open 2 s after the reload: the old server waits for it")
	}
	for _, line := range logLines(t, g) {
		if strings.Contains(line, `"level":"error"`) {
			t.Errorf("ERROR logged across the reload: %s", line)
		}
	}

	ended = openStreamAt(t, g.base+"/ops/stream") // on the new server
	start := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.exited:
	case <-time.After(2 * time.Second):
		t.Fatal("Caddy had not exited 2 s after SIGTERM with a site stream open")
	}
	<-ended
	if code := g.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0 (%v)", code, time.Since(start))
	}
}
