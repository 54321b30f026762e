package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// gateway is one Caddy process with the plugin; a fault may kill, stop or reload it, and the
// harness starts it again on the same ports.
type gateway struct {
	name                string
	bin, dir            string
	adminPort, sitePort int
	site                func(variant int) string // the site block for a config variant

	up   atomic.Bool  // serving: the load and the admin checks use it only while up
	gen  atomic.Int64 // bumped whenever it goes down: a request that saw it change is excused
	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
	pid  atomic.Int64
	logs []string // one log file per process, in order
	// variant is the config variant loaded (a reload switches it).
	variant int
}

func newGateway(dir, bin, name string, site func(int) string) (*gateway, error) {
	g := &gateway{name: name, bin: bin, dir: filepath.Join(dir, name), site: site}
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if g.adminPort, err = testnet.FreePortWith(0); err != nil {
		return nil, err
	}
	if g.sitePort, err = testnet.FreePortWith(0); err != nil {
		return nil, err
	}
	return g, g.start()
}

func (g *gateway) base() string  { return "http://127.0.0.1:" + strconv.Itoa(g.sitePort) }
func (g *gateway) admin() string { return "http://127.0.0.1:" + strconv.Itoa(g.adminPort) }

// config is the gateway's whole Caddyfile for a variant.
func (g *gateway) config(variant int) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	auto_https off
	persist_config off
	skip_install_trust
	http_port %d
	grace_period 3s
}

http://127.0.0.1:%d {
%s
}
`, g.adminPort, g.sitePort, g.sitePort, g.site(variant))
}

func (g *gateway) writeConfig(variant int) (string, error) {
	path := filepath.Join(g.dir, fmt.Sprintf("Caddyfile.%d", variant))
	return path, os.WriteFile(path, []byte(g.config(variant)), 0o600)
}

// start runs Caddy and waits until the site answers (any status: the limiter may refuse).
func (g *gateway) start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	path, err := g.writeConfig(g.variant)
	if err != nil {
		return err
	}
	logPath := filepath.Join(g.dir, fmt.Sprintf("caddy.%d.log", len(g.logs)))
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(g.bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+g.dir, "XDG_DATA_HOME="+g.dir, "XDG_CONFIG_HOME="+g.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	g.logs = append(g.logs, logPath)
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	g.cmd, g.exit = cmd, exit
	g.pid.Store(int64(cmd.Process.Pid))
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(g.base() + "/ready")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-exit:
			return fmt.Errorf("%s exited at start (log %s)", g.name, logPath)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within 30 s (log %s)", g.name, logPath)
		}
	}
	g.up.Store(true)
	return nil
}

// stop ends the process with sig (SIGTERM: graceful; SIGKILL: a crash) and waits for it.
func (g *gateway) stop(sig syscall.Signal) {
	g.up.Store(false)
	g.gen.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return
	}
	_ = g.cmd.Process.Signal(sig)
	select {
	case <-g.exit:
	case <-time.After(15 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exit
	}
	g.cmd = nil
	g.pid.Store(0)
}

// reload loads the other config variant (a policy change: a2's burst), or the same one with
// --force, through `caddy reload`, as an operator would.
func (g *gateway) reload(change bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if change {
		g.variant = 1 - g.variant
	}
	path, err := g.writeConfig(g.variant)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"reload", "--config", path, "--adapter", "caddyfile", "--address", fmt.Sprintf("127.0.0.1:%d", g.adminPort)}
	if !change {
		args = append(args, "--force")
	}
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+g.dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("caddy reload on %s: %v: %s", g.name, err, out)
	}
	return nil
}

func (g *gateway) logFiles() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.logs...)
}
