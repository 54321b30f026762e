package main

import (
	"context"
	"fmt"
	"io"
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

// node is one redis-server started by the harness (a child that dies with it).
type node struct {
	addr   string
	cmd    *exec.Cmd
	done   chan struct{}
	client *redis.Client
}

// startCluster starts n redis-server processes with --cluster-enabled yes on free loopback
// ports (each in its own directory under dir), joins them as n masters without replicas and
// waits for cluster_state:ok on every node.
func startCluster(dir string, n int, log io.Writer) ([]*node, error) {
	var nodes []*node
	stop := func() {
		for _, nd := range nodes {
			nd.stop()
		}
	}
	for i := range n {
		port, err := testnet.FreePortWith(0)
		if err != nil {
			stop()
			return nil, err
		}
		d := filepath.Join(dir, fmt.Sprintf("node-%d", port))
		if err := os.MkdirAll(d, 0o755); err != nil {
			stop()
			return nil, err
		}
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", d,
			"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
			"--cluster-node-timeout", "5000", "--maxclients", "20000")
		cmd.Dir = d
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("redis-server: %v", err)
		}
		nd := &node{addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(nd.done) }()
		nd.client = redis.NewClient(&redis.Options{Addr: nd.addr})
		nodes = append(nodes, nd)
		_ = i
	}
	ctx := context.Background()
	for _, nd := range nodes {
		deadline := time.Now().Add(10 * time.Second)
		for nd.client.Ping(ctx).Err() != nil {
			if time.Now().After(deadline) {
				stop()
				return nil, fmt.Errorf("redis-server on %s did not start", nd.addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	args := []string{"--cluster", "create"}
	for _, nd := range nodes {
		args = append(args, nd.addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, "redis-cli", args...).CombinedOutput()
	fmt.Fprintf(log, "$ redis-cli %s\n%s\n", strings.Join(args, " "), out)
	if err != nil {
		stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, nd := range nodes {
		for {
			info, err := nd.client.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				stop()
				return nil, fmt.Errorf("%s: no cluster_state:ok after 20 s", nd.addr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nodes, nil
}

func (nd *node) stop() {
	_ = nd.client.Close()
	_ = nd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-nd.done:
	case <-time.After(10 * time.Second):
		_ = nd.cmd.Process.Kill()
		<-nd.done
	}
}

// cpu is the node's user + system CPU time so far (/proc/<pid>/stat, 10 ms ticks).
func (nd *node) cpu() time.Duration {
	s, err := readFile(fmt.Sprintf("/proc/%d/stat", nd.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	return parseStat(s)
}

// harnessCommand reports whether a commandstats entry is the harness's or the client library's
// own bookkeeping (INFO, CONFIG, PING, CLUSTER SLOTS/SHARDS, HELLO, CLIENT …), not limiter work.
func harnessCommand(name string) bool {
	base, _, _ := strings.Cut(name, "|")
	switch base {
	case "info", "config", "ping", "cluster", "hello", "client", "command", "readonly":
		return true
	}
	return false
}

// scriptCommand reports whether a command runs a server-side script (one round trip each).
func scriptCommand(name string) bool {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

// counts reads INFO commandstats: script calls and all limiter calls (in-script commands
// included, since Redis counts them too).
func (nd *node) counts(ctx context.Context) (scripts, commands int64, err error) {
	info, err := nd.client.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	return parseCommandStats(info)
}

func parseCommandStats(info string) (scripts, commands int64, err error) {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		callsField, _, _ := strings.Cut(fields, ",")
		v, ok := strings.CutPrefix(callsField, "calls=")
		if !ok {
			continue
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("commandstats %q: %v", line, perr)
		}
		if harnessCommand(name) {
			continue
		}
		commands += n
		if scriptCommand(name) {
			scripts += n
		}
	}
	return scripts, commands, nil
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

// parseStat is the user + system CPU time of a /proc/<pid>/stat line.
func parseStat(s string) time.Duration {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}
