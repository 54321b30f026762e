package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/testenv"
	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// startPrometheus runs a real Prometheus server on port, scraping targets' /metrics every
// second. In CI a missing prometheus binary fails the test.
func startPrometheus(t *testing.T, port int, targets ...string) {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.Missing(t, "prometheus is not installed (scripts/test.sh installs Debian's package)")
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"+
		"  - job_name: caddy\n    static_configs:\n      - targets: ['%s']\n", strings.Join(targets, "', '"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus log:\n%s", lastLines(string(b), 30))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready within 30 s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rangePoint is what the test reads of a point of GET /rate_limit/history?range=.
type rangePoint struct {
	T         int64   `json:"t"`
	Admitted  float64 `json:"admitted"`
	Rejected  float64 `json:"rejected"`
	Instances int     `json:"instances"`
}

// TestLongHistoryFromPrometheus: a real Prometheus scrapes two real Caddy instances; the admin
// API of either answers the console's long ranges (fleet and one app) from its range queries,
// with both instances' traffic in them.
func TestLongHistoryFromPrometheus(t *testing.T) {
	promPort := testnet.FreePort(t)
	site := func() string {
		return fmt.Sprintf(`	rate_limit {
		cluster e2e-prom
		key {http.request.header.X-App-Id}
		app alpha {
			guaranteed 1000
			burst 1000
		}
		console {
			prometheus http://127.0.0.1:%d
		}
	}
	respond "ok"`, promPort)
	}
	a := startGateway(t, "prom-a", site())
	b := startGateway(t, "prom-b", site())

	var v struct {
		Available bool         `json:"available"`
		Reason    string       `json:"reason"`
		Points    []rangePoint `json:"points"`
	}
	// Prometheus not yet up: the admin API names it as the failing part.
	if status, _, body := a.adminJSON("GET", "/rate_limit/history?range=1h", &v); status != http.StatusBadGateway ||
		!strings.Contains(body, fmt.Sprintf("prometheus at http://127.0.0.1:%d", promPort)) {
		t.Fatalf("range with Prometheus down: %d %s", status, body)
	}

	startPrometheus(t, promPort, strings.TrimPrefix(a.admin, "http://"), strings.TrimPrefix(b.admin, "http://"))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, g := range []*gateway{a, b} {
		wg.Add(1)
		go func() { // 20 requests/s on each gateway until the ranges have them
			defer wg.Done()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					g.send("GET", "/", "alpha", "")
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	// More than one gateway's 20/s in the newest point with traffic: both gateways' counters are
	// in the sum (the 6h range's 2-minute rate window fills more slowly: traffic is enough).
	for path, atLeast := range map[string]float64{
		"/rate_limit/history?range=1h":           21,
		"/rate_limit/history?range=1h&app=alpha": 21,
		"/rate_limit/history?range=6h&app=alpha": 0,
	} {
		deadline := time.Now().Add(90 * time.Second)
		for {
			v.Points = nil
			status, _, body := b.adminJSON("GET", path, &v)
			if status != http.StatusOK || !v.Available {
				t.Fatalf("%s: %d %s", path, status, body)
			}
			last := rangePoint{}
			for _, p := range v.Points {
				if p.Admitted > 0 {
					last = p
				}
			}
			if last.Admitted > atLeast && last.Instances == 2 {
				t.Logf("%s: %d points, newest with traffic %+v", path, len(v.Points), last)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no point with both gateways' traffic within 90 s; newest %+v", path, last)
			}
			time.Sleep(time.Second)
		}
	}
}
