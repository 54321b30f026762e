package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// startTimeout bounds how long a Caddy process may take to answer on its admin endpoint and
// its site port.
const startTimeout = 20 * time.Second

// gateway is one Caddy process with a single http:// site on a loopback port.
type gateway struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	exited  chan struct{}
	admin   string // http://127.0.0.1:port of the admin endpoint
	base    string // http://127.0.0.1:port of the site
	logPath string

	dir                 string // the test's directory (configs, logs, Caddy's data)
	adminPort, sitePort int
	reloads             int
	adminBlock          string // the admin option's block ("" none): see startGatewayAdmin
	global              string // more global options ("" none): see startGatewayGlobal
}

// gatewayConfig is the whole Caddyfile of a gateway: global options and one site.
func gatewayConfig(adminPort, sitePort int, site string) string {
	return gatewayConfigAdmin(adminPort, sitePort, site, "")
}

// gatewayConfigAdmin is gatewayConfig with a block for the admin option (its lines, or "").
func gatewayConfigAdmin(adminPort, sitePort int, site, adminBlock string) string {
	return gatewayConfigGlobal(adminPort, sitePort, site, adminBlock, "")
}

// gatewayConfigGlobal is gatewayConfigAdmin with more global options (lines, or "").
func gatewayConfigGlobal(adminPort, sitePort int, site, adminBlock, global string) string {
	if adminBlock != "" {
		adminBlock = " {\n" + adminBlock + "\n\t}"
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d%s
	auto_https off
	persist_config off
	skip_install_trust
	http_port %d
	grace_period 2s
%s
}

http://127.0.0.1:%d {
%s
}
`, adminPort, adminBlock, sitePort, global, sitePort, site)
}

// reload replaces the gateway's site with `caddy reload`, as an operator would.
func (g *gateway) reload(site string) {
	g.t.Helper()
	if out, err := g.tryReload(site); err != nil {
		g.t.Fatalf("caddy reload: %v\n%s", err, out)
	}
}

// tryReload is reload for a reload that may be refused: it returns caddy reload's output.
func (g *gateway) tryReload(site string) (string, error) {
	g.t.Helper()
	g.reloads++
	path := filepath.Join(g.dir, fmt.Sprintf("Caddyfile.reload%d", g.reloads))
	if err := os.WriteFile(path, []byte(gatewayConfigGlobal(g.adminPort, g.sitePort, site, g.adminBlock, g.global)), 0o644); err != nil {
		g.t.Fatal(err)
	}
	cmd := exec.Command(caddyBin, "reload", "--config", path, "--adapter", "caddyfile",
		"--address", fmt.Sprintf("127.0.0.1:%d", g.adminPort))
	cmd.Env = append(os.Environ(), "HOME="+g.dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// startGateway runs Caddy with one site whose body is site (routes and handlers) and waits until
// both its admin endpoint and its site answer. The process is stopped at cleanup; its log is
// printed if the test failed.
func startGateway(t *testing.T, name, site string) *gateway {
	t.Helper()
	return startGatewayAdmin(t, name, site, "")
}

// startGatewayAdmin is startGateway with the lines of a block for the admin option, in which
// "{port}" stands for the admin endpoint's port.
func startGatewayAdmin(t *testing.T, name, site, adminBlock string) *gateway {
	t.Helper()
	return startGatewayFull(t, name, site, adminBlock, "")
}

// startGatewayGlobal is startGateway with more global options (such as "debug").
func startGatewayGlobal(t *testing.T, name, site, global string) *gateway {
	t.Helper()
	return startGatewayFull(t, name, site, "", global)
}

func startGatewayFull(t *testing.T, name, site, adminBlock, global string) *gateway {
	t.Helper()
	requireCaddy(t)
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a picked port may be taken before Caddy binds it
		g, err := tryStartGateway(t, name, site, adminBlock, global, dir, attempt, nil)
		if err == nil {
			return g
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("gateway %s: %v", name, lastErr)
	return nil
}

// startGatewayJSON is startGateway with a JSON config: the gateway's Caddyfile adapted by
// `caddy adapt`, then changed by edit (for what the Caddyfile cannot say, such as admin.remote).
func startGatewayJSON(t *testing.T, name, site string, edit func(cfg map[string]any)) *gateway {
	t.Helper()
	requireCaddy(t)
	g, err := tryStartGateway(t, name, site, "", "", t.TempDir(), 0, edit)
	if err != nil {
		t.Fatalf("gateway %s: %v", name, err)
	}
	return g
}

func tryStartGateway(t *testing.T, name, site, adminBlock, global, dir string, attempt int, edit func(map[string]any)) (*gateway, error) {
	adminPort, sitePort := testnet.FreePort(t), testnet.FreePort(t)
	adminBlock = strings.ReplaceAll(adminBlock, "{port}", strconv.Itoa(adminPort))
	conf := gatewayConfigGlobal(adminPort, sitePort, site, adminBlock, global)
	confPath := filepath.Join(dir, fmt.Sprintf("Caddyfile.%d", attempt))
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	adapter := []string{"--adapter", "caddyfile"}
	if edit != nil {
		out, err := exec.Command(caddyBin, "adapt", "--config", confPath, "--adapter", "caddyfile").Output()
		if err != nil {
			return nil, fmt.Errorf("caddy adapt: %v", err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(out, &cfg); err != nil {
			return nil, err
		}
		edit(cfg)
		b, err := json.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		confPath = filepath.Join(dir, fmt.Sprintf("caddy.%d.json", attempt))
		if err := os.WriteFile(confPath, b, 0o644); err != nil {
			return nil, err
		}
		adapter = nil
	}
	logPath := filepath.Join(dir, fmt.Sprintf("caddy-%s.%d.log", name, attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(caddyBin, append([]string{"run", "--config", confPath}, adapter...)...)
	cmd.Dir = dir
	// Caddy's data and config directories go to the test's own directory.
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	g := &gateway{
		t: t, name: name, cmd: cmd, exited: make(chan struct{}),
		admin:   fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		base:    fmt.Sprintf("http://127.0.0.1:%d", sitePort),
		logPath: logPath,
		dir:     dir, adminPort: adminPort, sitePort: sitePort, adminBlock: adminBlock, global: global,
	}
	go func() {
		cmd.Wait()
		logFile.Close()
		close(g.exited)
	}()
	if err := g.waitReady(); err != nil {
		g.kill()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%v\n%s", err, lastLines(string(log), 30))
	}
	t.Cleanup(func() {
		g.stop()
		if t.Failed() {
			g.dumpLog()
		}
	})
	return g, nil
}

// waitReady polls the admin endpoint and the site port until both answer (bounded).
func (g *gateway) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-g.exited:
			return errors.New("caddy exited during start-up")
		default:
		}
		if resp, err := client.Get(g.admin + "/config/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if c, err := net.DialTimeout("tcp", strings.TrimPrefix(g.base, "http://"), time.Second); err == nil {
					c.Close()
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v", startTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pid is the Caddy process's id (part of its instance id in the fleet).
func (g *gateway) pid() int { return g.cmd.Process.Pid }

// kill ends the process at once (SIGKILL, as a crash would) and waits for it.
func (g *gateway) kill() {
	g.cmd.Process.Kill()
	<-g.exited
}

// stop asks Caddy to shut down (SIGINT) and kills it if it has not exited within 10 s.
func (g *gateway) stop() { g.signal(syscall.SIGINT) }

// terminate is stop with SIGTERM, as systemd, Kubernetes and docker stop send.
func (g *gateway) terminate() { g.signal(syscall.SIGTERM) }

// signal sends sig unless the process has exited, and waits for it to exit, killing it if it
// has not within 10 s.
func (g *gateway) signal(sig os.Signal) {
	select {
	case <-g.exited:
		return
	default:
	}
	_ = g.cmd.Process.Signal(sig)
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		g.t.Logf("gateway %s did not stop within 10 s of %v; killing it", g.name, sig)
		g.kill()
	}
}

// dumpLog prints the end of the gateway's log to the test output.
func (g *gateway) dumpLog() {
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		g.t.Logf("gateway %s: reading log: %v", g.name, err)
		return
	}
	g.t.Logf("---- log of gateway %s (%s), last lines ----\n%s", g.name, g.logPath, lastLines(string(b), 80))
}

// metric reads one sample of the admin /metrics: the first line of family name whose labels
// include every one of labels ("cluster=\"x\""). ok is false when there is no such sample.
func (g *gateway) metric(name string, labels ...string) (v float64, ok bool, err error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(g.admin + "/metrics")
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		var lbl string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			lbl, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // a longer family name with this prefix
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(","+lbl+",", ","+l+",") {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, false, fmt.Errorf("metric line %q: %v", line, err)
		}
		return f, true, nil
	}
	return 0, false, sc.Err()
}

// waitMetric polls the admin /metrics until the sample (absent counts as 0) satisfies cond, or
// fails the test after timeout.
func (g *gateway) waitMetric(timeout time.Duration, cond func(float64) bool, name string, labels ...string) float64 {
	g.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, _, err := g.metric(name, labels...)
		if err == nil && cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("gateway %s: %s%v is %v (err %v) after %v", g.name, name, labels, v, err, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// drain reads and closes a response body so that the connection is reused.
func drain(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
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
