package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// consoleSite: two apps with room for the console test's steady traffic (alpha 2 req/s, beta
// 10 req/s) and a cluster capacity, so that every chart has something to show.
const consoleSite = `	rate_limit {
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
	respond "ok"`

// consoleAdmin lets a browser open the console by its address: Caddy's admin endpoint checks
// the origin of every request that has a Sec-Fetch-Mode header, and a navigation typed into the
// address bar has neither Origin nor Referer, so it is refused unless "" is an allowed origin
// (docs/console.md).
const consoleAdmin = "\t\torigins 127.0.0.1:{port} localhost:{port} \"\""

// TestConsoleBrowser runs the console's browser tests (console/tests/e2e, Playwright on the
// system's Chromium) against a real Caddy with traffic: the dashboard shows the apps and
// non-empty charts, an edit of alpha's quota through the form changes what the limiter
// enforces, and the emergency is activated and deactivated through the UI. With
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
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing (scripts/test.sh installs chromium and runs npm ci in console/)", need)
			}
			t.Skipf("%s is missing: run scripts/test.sh, or apt-get install chromium and npm ci in console/", need)
		}
	}

	g := startGatewayAdmin(t, "console", consoleSite, consoleAdmin)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for app, every := range map[string]time.Duration{"alpha": 500 * time.Millisecond, "beta": 100 * time.Millisecond} {
		wg.Add(1)
		go func() { // steady traffic until the test ends (bounded by the test's own duration)
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				req, _ := http.NewRequestWithContext(ctx, "GET", g.base+"/traffic", nil)
				req.Header.Set("X-App-Id", app)
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
