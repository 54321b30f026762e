package tierbucket

// End-to-end tests: the real Caddy binary (Caddy + this plugin, built once per test run from
// ./cmd/caddy) on loopback ports, driven over HTTP: requests, reloads with `caddy reload`,
// metrics on the admin endpoint. Skipped with -short.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// TestMain removes the binary built for the end-to-end tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// caddyBinary builds Caddy with the plugin once per test binary.
func caddyBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test builds and runs the caddy binary; skipped with -short")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tierbucket-e2e-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "caddy")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/caddy")
		cmd.Dir = "." // the module root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// instance is one running caddy process.
type instance struct {
	t      *testing.T
	bin    string
	dir    string
	admin  string // host:port
	base   string // http://127.0.0.1:port
	config string // Caddyfile path
	cmd    *exec.Cmd
	log    *bytes.Buffer
	done   chan struct{}
}

// globalOptions returns the Caddyfile global block for an instance.
func globalOptions(admin string) string {
	return fmt.Sprintf(`{
	admin %s
	skip_install_trust
	auto_https off
	persist_config off
	grace_period 2s
}
`, admin)
}

// startCaddy writes the Caddyfile (global options + site body on a fresh port) and runs caddy.
func startCaddy(t *testing.T, site func(base string) string) *instance {
	t.Helper()
	bin := caddyBinary(t)
	dir := t.TempDir()
	in := &instance{
		t: t, bin: bin, dir: dir,
		admin:  fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		base:   fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
		config: filepath.Join(dir, "Caddyfile"),
		log:    new(bytes.Buffer),
		done:   make(chan struct{}),
	}
	in.writeConfig(site(in.base))
	in.cmd = exec.Command(bin, "run", "--config", in.config, "--adapter", "caddyfile")
	in.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	in.cmd.Stdout, in.cmd.Stderr = in.log, in.log
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = in.cmd.Wait(); close(in.done) }()
	t.Cleanup(in.stop)
	in.waitReady()
	return in
}

func (in *instance) writeConfig(site string) {
	cfg := globalOptions(in.admin) + "\n" + in.base + " {\n" + site + "\n}\n"
	if err := os.WriteFile(in.config, []byte(cfg), 0o644); err != nil {
		in.t.Fatal(err)
	}
}

// waitReady polls until the site answers (bounded: 30 s), or fails with caddy's log.
func (in *instance) waitReady() {
	in.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-in.done:
			in.t.Fatalf("caddy exited:\n%s", in.log)
		default:
		}
		resp, err := http.Get("http://" + in.admin + "/config/")
		if err == nil {
			resp.Body.Close()
			if c, err := net.DialTimeout("tcp", strings.TrimPrefix(in.base, "http://"), time.Second); err == nil {
				c.Close()
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	in.t.Fatalf("caddy did not become ready:\n%s", in.log)
}

// stop asks caddy to stop through the admin API and waits for the process to exit.
func (in *instance) stop() {
	select {
	case <-in.done:
		return
	default:
	}
	resp, err := http.Post("http://"+in.admin+"/stop", "", nil)
	if err == nil {
		resp.Body.Close()
	}
	select {
	case <-in.done:
	case <-time.After(15 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.done
	}
	if in.t.Failed() {
		in.t.Logf("caddy log (%s):\n%s", in.base, e2eLastLines(in.log.String(), 40))
	}
}

// reload replaces the config with `caddy reload`, like an operator would.
func (in *instance) reload(site string) {
	in.t.Helper()
	in.writeConfig(site)
	cmd := exec.Command(in.bin, "reload", "--config", in.config, "--adapter", "caddyfile", "--address", in.admin)
	cmd.Env = append(os.Environ(), "HOME="+in.dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		in.t.Fatalf("caddy reload: %v\n%s", err, out)
	}
}

type e2eResponse struct {
	status int
	header http.Header
	body   string
}

func (in *instance) do(method, path, app, body string) e2eResponse {
	in.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, in.base+path, rd)
	if err != nil {
		in.t.Fatal(err)
	}
	req.Header.Set("X-App-Id", app)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return e2eResponse{resp.StatusCode, resp.Header, string(b)}
}

func (in *instance) metrics() string {
	in.t.Helper()
	resp, err := http.Get("http://" + in.admin + "/metrics")
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func e2eLastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// memorySite is the config of TestEndToEndMemoryStore; burst is what the reload changes.
func memorySite(backend string, burst int) string {
	return fmt.Sprintf(`	rate_limit {
		cluster e2e
		key {http.request.header.X-App-Id}
		unknown_app reject
		app alpha {
			guaranteed 0.01
			burst %d
		}
		app beta {
			guaranteed 0.01
			burst 100
		}
	}
	handle /upload/* {
		reverse_proxy %s
	}
	respond "{http.rate_limit.remaining}"`, burst, backend)
}

// TestEndToEndMemoryStore: the real binary on the embedded store. Burst then 429 with the JSON
// body; a cost-weighted PUT through a proxy; then `caddy reload` with a changed policy keeps
// the bucket (the remaining count continues instead of starting from a full bucket again).
func TestEndToEndMemoryStore(t *testing.T) {
	backend := readingBackend(t)
	in := startCaddy(t, func(string) string { return memorySite(backend, 10) })

	for i := 0; i < 4; i++ {
		r := in.do("GET", "/bucket/key", "alpha", "")
		if r.status != 200 || r.body != strconv.Itoa(9-i) {
			t.Fatalf("request %d: %d %q, want 200 remaining %d", i+1, r.status, r.body, 9-i)
		}
	}
	if r := in.do("GET", "/bucket/key", "stranger", ""); r.status != 403 || !strings.Contains(r.body, `"reason":"unknown_app"`) {
		t.Errorf("unknown app: %d %q", r.status, r.body)
	}
	if r := in.do("GET", "/bucket/key", "", ""); r.status != 400 || !strings.Contains(r.body, `"reason":"invalid_app_id"`) {
		t.Errorf("missing app id: %d %q", r.status, r.body)
	}

	// cost-weighted PUT: 5 + ceil(200 KiB / 64 KiB) = 9, the body read by the backend
	r := in.do("PUT", "/upload/bucket/object", "beta", strings.Repeat("x", 200*1024))
	if r.status != 200 || r.body != "read 204800" || r.header.Get("X-RateLimit-Cost") != "9" ||
		r.header.Get("X-RateLimit-Remaining") != "91" {
		t.Errorf("PUT: %d %q cost %q remaining %q", r.status, r.body, r.header.Get("X-RateLimit-Cost"),
			r.header.Get("X-RateLimit-Remaining"))
	}

	// reload with a changed policy (burst 10 -> 12): 6 tokens were left and stay left
	in.reload(memorySite(backend, 12))
	r = in.do("GET", "/bucket/key", "alpha", "")
	if r.status != 200 || r.body != "5" {
		t.Fatalf("after reload: %d %q, want remaining 5 (state kept)", r.status, r.body)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"app";q=12;w=1200` {
		t.Errorf("new policy not applied: RateLimit-Policy %q", got)
	}
	for i := 0; i < 5; i++ {
		if r := in.do("GET", "/bucket/key", "alpha", ""); r.status != 200 {
			t.Fatalf("request %d after reload: %d %q", i+1, r.status, r.body)
		}
	}
	r = in.do("GET", "/bucket/key", "alpha", "")
	if r.status != 429 {
		t.Fatalf("after the burst: %d %q, want 429", r.status, r.body)
	}
	var rej struct {
		Error      string `json:"error"`
		Reason     string `json:"reason"`
		RetryAfter int64  `json:"retry_after"`
		Remaining  int64  `json:"remaining"`
		Cost       int64  `json:"cost"`
	}
	if err := json.Unmarshal([]byte(r.body), &rej); err != nil || rej.Error != "rate_limit_exceeded" ||
		rej.Reason != "app_exhausted" || rej.RetryAfter < 1 || rej.Cost != 1 {
		t.Errorf("rejection body %q (%v)", r.body, err)
	}
	if r.header.Get("Content-Type") != "application/json" || r.header.Get("Retry-After") == "" {
		t.Errorf("rejection headers %v", r.header)
	}

	m := in.metrics()
	for _, want := range []string{
		`caddy_rate_limit_requests_total{app="alpha",cluster="e2e",decision="allowed",reason=""} 10`,
		`caddy_rate_limit_requests_total{app="alpha",cluster="e2e",decision="rejected",reason="app_exhausted"} 1`,
		`caddy_rate_limit_requests_total{app="*",cluster="e2e",decision="rejected",reason="unknown_app"} 1`,
		`caddy_rate_limit_cost_total{app="beta",cluster="e2e"} 9`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
