package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// wrkScript makes wrk print one machine-readable line at the end, from the same latency
// histogram that `--latency` prints (microseconds).
const wrkScript = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH requests=%d duration_us=%d status_errors=%d socket_errors=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
`

// rotateScript (prepended to wrkScript) makes every request carry the next of n Host values
// app1 … appN (per wrk thread, each thread starting at its own offset).
const rotateScript = `local n = %d
local i = math.random(n)
request = function()
  i = i %% n + 1
  wrk.headers["Host"] = "app" .. i
  return wrk.format()
end
`

// wrkResult is what one wrk run measured.
type wrkResult struct {
	Requests     int64
	Duration     time.Duration
	StatusErrors int64 // responses that were not 2xx/3xx (the limiters' 429s)
	SocketErrors int64
	P50, P99     time.Duration
}

// RPS is requests per second.
func (r wrkResult) RPS() float64 { return float64(r.Requests) / r.Duration.Seconds() }

// AdmittedRPS is 2xx responses per second.
func (r wrkResult) AdmittedRPS() float64 {
	return float64(r.Requests-r.StatusErrors-r.SocketErrors) / r.Duration.Seconds()
}

// wrkRunner runs wrk with fixed settings against loopback URLs.
type wrkRunner struct {
	threads, conns int
	script         string
	dir            string
}

func newWrkRunner(dir string, threads, conns int) (*wrkRunner, error) {
	script := filepath.Join(dir, "bench.lua")
	if err := os.WriteFile(script, []byte(wrkScript), 0o600); err != nil {
		return nil, err
	}
	return &wrkRunner{threads: threads, conns: conns, script: script, dir: dir}, nil
}

// run loads http://127.0.0.1:port/ for d (hosts > 1: rotating the Host header over hosts app
// ids); the full wrk output is appended to log.
func (w *wrkRunner) run(port, hosts int, d time.Duration, log *os.File) (wrkResult, error) {
	script, host := w.script, appHost
	if hosts > 1 {
		script = filepath.Join(w.dir, fmt.Sprintf("rotate-%d.lua", hosts))
		if err := os.WriteFile(script, []byte(fmt.Sprintf(rotateScript, hosts)+wrkScript), 0o600); err != nil {
			return wrkResult{}, err
		}
	} else if hosts == 1 {
		host = "app1"
	}
	secs := int(d.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	name, args := pinned(loadCPUs, "wrk", []string{
		"-t", fmt.Sprint(w.threads), "-c", fmt.Sprint(w.conns), "-d", fmt.Sprintf("%ds", secs),
		"--latency", "-s", script, "-H", "Host: " + host,
		fmt.Sprintf("http://127.0.0.1:%d/", port),
	})
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	fmt.Fprintf(log, "$ %s\n%s\n", strings.Join(cmd.Args, " "), out)
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v", err)
	}
	return parseWrk(string(out))
}

// parseWrk reads the BENCH line written by wrkScript.
func parseWrk(out string) (wrkResult, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "BENCH ") {
			continue
		}
		var r wrkResult
		var durUS, p50, p99 int64
		_, err := fmt.Sscanf(line, "BENCH requests=%d duration_us=%d status_errors=%d socket_errors=%d p50_us=%d p99_us=%d",
			&r.Requests, &durUS, &r.StatusErrors, &r.SocketErrors, &p50, &p99)
		if err != nil {
			return wrkResult{}, fmt.Errorf("wrk output %q: %v", line, err)
		}
		if r.Requests == 0 || durUS == 0 {
			return wrkResult{}, fmt.Errorf("wrk sent no requests: %q", line)
		}
		r.Duration = time.Duration(durUS) * time.Microsecond
		r.P50 = time.Duration(p50) * time.Microsecond
		r.P99 = time.Duration(p99) * time.Microsecond
		return r, nil
	}
	return wrkResult{}, fmt.Errorf("no BENCH line in wrk output:\n%s", out)
}
