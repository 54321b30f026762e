package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// proc is a child process started by the bench; stop ends it (SIGTERM, then SIGKILL).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// serverCPUs, when set (-server-cpus), pins Caddy and redis-server to those CPUs (taskset), and
// loadCPUs (-load-cpus) pins wrk: on a small machine, the servers then do not share cores with
// the load generator, whose own load varies by variant.
var serverCPUs, loadCPUs string

// pinned returns the command line that runs name on cpus (taskset execs it: the pid is name's).
func pinned(cpus, name string, args []string) (string, []string) {
	if cpus == "" {
		return name, args
	}
	return "taskset", append([]string{"-c", cpus, name}, args...)
}

// start starts name with args in dir; env adds to the environment.
func start(name string, args []string, dir string, log io.Writer, env ...string) (*proc, error) {
	name, args = pinned(serverCPUs, name, args)
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	// Keep Caddy's data and config (autosave, storage) inside the bench's temp dir.
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Env = append(cmd.Env, env...)
	// Whatever way the harness ends, its servers end with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuTime is the user + system CPU time the process has used so far (all its threads), from
// /proc/<pid>/stat. Unlike throughput, CPU time per request hardly depends on what else the
// (shared) machine is doing.
func (p *proc) cpuTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// peakRSS is the process's peak resident set size (VmHWM in /proc/<pid>/status), in bytes.
func (p *proc) peakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseVmHWM(string(b))
}

func parseVmHWM(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc status")
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux ABI.
const clockTick = 10 * time.Millisecond

func parseStatCPU(stat string) (time.Duration, error) {
	// The command name (field 2) may hold spaces and parentheses: fields are counted after its ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad /proc stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("bad /proc stat %q", stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc stat times %q %q", f[11], f[12])
	}
	return time.Duration(utime+stime) * clockTick, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// redisServer is the bench's own redis-server on a free loopback port.
type redisServer struct {
	proc   *proc
	addr   string
	client *redis.Client
}

func startRedis(dir string, log io.Writer) (*redisServer, error) {
	port, err := testnet.FreePortWith(0)
	if err != nil {
		return nil, err
	}
	p, err := start("redis-server", []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
	}, dir, log)
	if err != nil {
		return nil, fmt.Errorf("redis-server: %v", err)
	}
	r := &redisServer{proc: p, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	r.client = redis.NewClient(&redis.Options{Addr: r.addr})
	deadline := time.Now().Add(10 * time.Second)
	for r.client.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) || p.exited() {
			p.stop()
			return nil, fmt.Errorf("redis-server on %s did not start", r.addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r, nil
}

// reset empties the database and the command statistics.
func (r *redisServer) reset() error {
	ctx := context.Background()
	if err := r.client.FlushAll(ctx).Err(); err != nil {
		return err
	}
	return r.resetStats()
}

func (r *redisServer) resetStats() error {
	return r.client.ConfigResetStat(context.Background()).Err()
}

// harnessCommands are the commands the bench itself sends; they are not counted.
var harnessCommands = map[string]bool{"info": true, "config": true, "flushall": true, "ping": true}

// scriptCommands run a server-side script; each is one round trip from the client.
var scriptCommands = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true,
	"fcall": true, "fcall_ro": true,
}

// commandCalls reads INFO commandstats since the last reset, without the harness's own commands:
// all calls (which include the commands run inside scripts) and the script calls alone.
// The raw statistics go to log, for a breakdown by command.
func (r *redisServer) commandCalls(log io.Writer) (all, scripts int64, err error) {
	info, err := r.client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	fmt.Fprintf(log, "redis %s", info)
	all, scripts = sumCommandCalls(info)
	return all, scripts, nil
}

// sumCommandCalls parses lines like "cmdstat_evalsha:calls=12,usec=34,..." (Redis 7 also has
// subcommands such as "cmdstat_config|resetstat").
func sumCommandCalls(info string) (all, scripts int64) {
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd, _, _ := strings.Cut(strings.TrimPrefix(name, "cmdstat_"), "|")
		if harnessCommands[cmd] {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				all += n
				if scriptCommands[cmd] {
					scripts += n
				}
			}
		}
	}
	return all, scripts
}

func (r *redisServer) stop() {
	_ = r.client.Close()
	r.proc.stop()
}

// caddyServer is one running Caddy variant.
type caddyServer struct {
	proc      *proc
	httpPort  int
	adminPort int
}

// startCaddy starts the Caddy build bin in dir on config; under callgrind when counting
// instructions (callgrindArgs).
func startCaddy(bin, dir, config string, httpPort, adminPort int, counting bool, log io.Writer) (*caddyServer, error) {
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	name, args := bin, []string{"run", "--config", path, "--adapter", "caddyfile"}
	var env []string
	if counting {
		name, args = "valgrind", append(callgrindArgs(dir, bin), args...)
		env = callgrindEnv
	}
	p, err := start(name, args, dir, log, env...)
	if err != nil {
		return nil, err
	}
	c := &caddyServer{proc: p, httpPort: httpPort, adminPort: adminPort}
	// Ready when the site answers (any status: a limiter may already say 429).
	url := fmt.Sprintf("http://127.0.0.1:%d/", httpPort)
	deadline := time.Now().Add(60 * time.Second) // under callgrind, Caddy starts in seconds
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return c, nil
		}
		if time.Now().After(deadline) || p.exited() {
			p.stop()
			return nil, fmt.Errorf("%s did not start (see the log): %v", bin, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metrics fetches the admin /metrics text.
func (c *caddyServer) metrics() (string, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", c.adminPort))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// rateLimitLines keeps the caddy_rate_limit_* samples (no histogram buckets), for the log.
func rateLimitLines(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "caddy_rate_limit_") && !strings.Contains(line, "_bucket{") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// sumMetric parses Prometheus text format lines "name{labels} value" or "name value".
func sumMetric(text, name string) float64 {
	var total float64
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err == nil {
			total += v
		}
	}
	return total
}
