package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/faultproxy"
	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// node is one redis-server (data node or sentinel) started by the harness, reached by the
// gateways through its proxy. Data nodes announce the proxy's port (cluster-announce-port,
// replica-announce-port), so that what a cluster or a sentinel tells a client names the proxy
// and every connection of a gateway to Redis passes a proxy the harness controls.
type node struct {
	name  string
	port  int // the server's own port (the harness's commands dial it directly)
	dir   string
	args  []string
	proxy *faultproxy.Proxy // nil for a sentinel: the gateways dial sentinels directly
	cl    *redis.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func (n *node) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// start runs the server (again, with the same directory: a cluster node keeps its nodes.conf)
// and waits until it answers PING.
func (n *node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	cmd := exec.Command("redis-server", n.args...)
	cmd.Dir = n.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: redis-server: %w", n.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for n.cl.Ping(context.Background()).Err() != nil {
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start (log in %s)", n.name, n.dir)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("%s did not answer PING within 10 s", n.name)
		}
	}
	n.cmd, n.exited = cmd, exited
	return nil
}

// kill stops the server with SIGKILL (a crash) and waits until it has exited.
func (n *node) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.exited
	n.cmd = nil
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// newNode prepares a node on a free port (and port+10000 for a cluster bus) in its own
// directory under dir; args are the extra redis-server arguments, "{proxy}" standing for the
// proxy's port when withProxy.
func newNode(dir, name string, withProxy bool, args func(port, proxyPort int) []string) (*node, error) {
	port, err := testnet.FreePortWith(10000)
	if err != nil {
		return nil, err
	}
	n := &node{name: name, port: port, dir: filepath.Join(dir, name)}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, err
	}
	proxyPort := 0
	if withProxy {
		if n.proxy, err = faultproxy.New(n.addr()); err != nil {
			return nil, err
		}
		proxyPort = n.proxy.Port()
	}
	n.args = args(port, proxyPort)
	n.cl = redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 3 * time.Second})
	return n, n.start()
}

// common are the arguments of every data node: no persistence, logs in its directory.
func common(port int) []string {
	return []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--logfile", "redis.log",
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
	}
}

// topology is the Redis deployment under test.
type topology struct {
	mode      string  // cluster | sentinel
	data      []*node // data nodes (cluster: masters and replicas; sentinel: master and replicas)
	sentinels []*node
	block     string // the lines of the gateways' redis block that name the servers
}

const sentinelMaster = "chaos"

// startCluster starts 3 masters with a replica each (cluster-node-timeout 2 s) behind proxies.
func startCluster(dir string) (*topology, error) {
	t := &topology{mode: "cluster"}
	for i := range 6 {
		n, err := newNode(dir, fmt.Sprintf("redis-%d", i), true, func(port, proxyPort int) []string {
			return append(common(port),
				"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "2000",
				"--cluster-announce-ip", "127.0.0.1",
				"--cluster-announce-port", strconv.Itoa(proxyPort),
				"--cluster-announce-bus-port", strconv.Itoa(port+10000))
		})
		if err != nil {
			t.stop()
			return nil, err
		}
		t.data = append(t.data, n)
	}
	args := []string{"--cluster", "create"}
	for _, n := range t.data {
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := t.waitHealthy(30 * time.Second); err != nil {
		t.stop()
		return nil, err
	}
	var addrs []string
	for _, n := range t.data[:3] {
		addrs = append(addrs, n.proxy.Addr())
	}
	t.block = "address " + strings.Join(addrs, " ")
	return t, nil
}

// startSentinel starts a master with two replicas behind proxies and three sentinels
// (quorum 2, down-after 1 s).
func startSentinel(dir string) (*topology, error) {
	t := &topology{mode: "sentinel"}
	var masterProxy int
	for i := range 3 {
		n, err := newNode(dir, fmt.Sprintf("redis-%d", i), true, func(port, proxyPort int) []string {
			a := append(common(port), "--replica-announce-ip", "127.0.0.1",
				"--replica-announce-port", strconv.Itoa(proxyPort))
			if i > 0 {
				a = append(a, "--replicaof", "127.0.0.1", strconv.Itoa(masterProxy))
			}
			return a
		})
		if err != nil {
			t.stop()
			return nil, err
		}
		if i == 0 {
			masterProxy = n.proxy.Port()
		}
		t.data = append(t.data, n)
	}
	var addrs []string
	for i := range 3 {
		n, err := newNode(dir, fmt.Sprintf("sentinel-%d", i), false, func(port, _ int) []string {
			d := filepath.Join(dir, fmt.Sprintf("sentinel-%d", i))
			conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nlogfile sentinel.log\n"+
				"sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s 1000\n"+
				"sentinel failover-timeout %s 4000\n", port, d, sentinelMaster, masterProxy, sentinelMaster, sentinelMaster)
			if err := os.WriteFile(filepath.Join(d, "sentinel.conf"), []byte(conf), 0o600); err != nil {
				panic(err) // the directory was just made: only a full disk gets here
			}
			return []string{filepath.Join(d, "sentinel.conf"), "--sentinel"}
		})
		if err != nil {
			t.stop()
			return nil, err
		}
		t.sentinels = append(t.sentinels, n)
		addrs = append(addrs, n.addr())
	}
	if err := t.waitHealthy(30 * time.Second); err != nil {
		t.stop()
		return nil, err
	}
	t.block = "sentinel " + sentinelMaster + "\n\t\t\taddress " + strings.Join(addrs, " ")
	return t, nil
}

// describe names each node with its own port and its proxy's (the port Redis announces).
func (t *topology) describe() string {
	var b strings.Builder
	for _, n := range t.data {
		fmt.Fprintf(&b, "%s port %d proxy %d\n", n.name, n.port, n.proxy.Port())
	}
	for _, n := range t.sentinels {
		fmt.Fprintf(&b, "%s port %d\n", n.name, n.port)
	}
	return b.String()
}

func (t *topology) stop() {
	for _, n := range append(append([]*node{}, t.data...), t.sentinels...) {
		n.kill()
		if n.proxy != nil {
			n.proxy.Close()
		}
		_ = n.cl.Close()
	}
}

func (t *topology) proxies() []*faultproxy.Proxy {
	ps := make([]*faultproxy.Proxy, 0, len(t.data))
	for _, n := range t.data {
		ps = append(ps, n.proxy)
	}
	return ps
}

// byProxyPort finds the data node whose proxy listens on port (the port the cluster and the
// sentinels announce).
func (t *topology) byProxyPort(port int) *node {
	for _, n := range t.data {
		if n.proxy.Port() == port {
			return n
		}
	}
	return nil
}

// waitHealthy waits until the deployment serves every key: cluster_state:ok on every running
// node and every running replica's link up (cluster); the sentinels agreeing on a running
// master whose replicas' links are up (sentinel).
func (t *topology) waitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var why error
	for time.Now().Before(deadline) {
		if why = t.healthy(); why == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not healthy within %v: %w", t.mode, timeout, why)
}

func (t *topology) healthy() error {
	ctx := context.Background()
	if t.mode == "sentinel" {
		m, err := t.sentinelMaster()
		if err != nil {
			return err
		}
		for _, n := range t.data {
			if n == m || !n.running() {
				continue
			}
			if info, err := n.cl.Info(ctx, "replication").Result(); err != nil || !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("%s: replication link not up", n.name)
			}
		}
		return nil
	}
	for _, n := range t.data {
		if !n.running() {
			continue
		}
		info, err := n.cl.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster not ok: %v", n.name, err)
		}
		repl, err := n.cl.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("%s: replication link not up", n.name)
		}
	}
	return nil
}

// sentinelMaster is the master the first answering sentinel names, if it runs.
func (t *topology) sentinelMaster() (*node, error) {
	for _, s := range t.sentinels {
		addr, err := s.cl.Do(context.Background(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMaster).StringSlice()
		if err != nil || len(addr) != 2 {
			continue
		}
		port, _ := strconv.Atoi(addr[1])
		if n := t.byProxyPort(port); n != nil && n.running() {
			return n, nil
		}
		return nil, fmt.Errorf("sentinels name master %v, which is not running", addr)
	}
	return nil, errors.New("no sentinel answers")
}

// clusterNode is a line of CLUSTER NODES.
type clusterNode struct {
	id, masterID string
	node         *node
	master, fail bool
}

// clusterNodes reads CLUSTER NODES from the first running node that answers.
func (t *topology) clusterNodes() ([]clusterNode, error) {
	for _, n := range t.data {
		if !n.running() {
			continue
		}
		out, err := n.cl.ClusterNodes(context.Background()).Result()
		if err != nil {
			continue
		}
		return parseClusterNodes(out, t.byProxyPort), nil
	}
	return nil, errors.New("no cluster node answers CLUSTER NODES")
}

// parseClusterNodes reads "id ip:port@bus flags master …" lines; find maps an announced port to
// its node.
func parseClusterNodes(out string, find func(int) *node) []clusterNode {
	var cns []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		hostPort, _, _ := strings.Cut(f[1], "@")
		_, p, _ := strings.Cut(hostPort, ":")
		port, _ := strconv.Atoi(p)
		cns = append(cns, clusterNode{
			id: f[0], masterID: f[3], node: find(port),
			master: strings.Contains(f[2], "master"),
			fail:   strings.Contains(f[2], "fail"),
		})
	}
	return cns
}

// masterOf is the running master serving key's slot, and the slot.
func (t *topology) masterOf(key string) (*node, int, error) {
	ctx := context.Background()
	for _, n := range t.data {
		if !n.running() {
			continue
		}
		slot, err := n.cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			continue
		}
		shards, err := n.cl.ClusterShards(ctx).Result()
		if err != nil {
			continue
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start > slot || slot > r.End {
					continue
				}
				for _, nd := range sh.Nodes {
					if m := t.byProxyPort(int(nd.Port)); m != nil && nd.Role == "master" && nd.Health == "online" {
						return m, int(slot), nil
					}
				}
			}
		}
	}
	return nil, 0, fmt.Errorf("no master found for %q", key)
}
