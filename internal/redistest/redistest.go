// Package redistest starts real redis-server processes for tests: a standalone server that can
// be stopped and started again on the same port (fault tests), and a 3-master Redis Cluster.
//
// Servers are child processes of the test binary (they die with it on Linux) listening on free
// loopback ports, each in its own temporary directory, with persistence off.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/testenv"
	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// startTimeout bounds how long a server may take to answer PING or a cluster to reach
// cluster_state:ok; the loops poll, they never sleep for a fixed time.
const startTimeout = 10 * time.Second

// Require skips the test when redis-server or redis-cli is not installed, unless the environment
// variable CI is set: in CI a missing Redis is a broken setup, so the test fails instead.
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, fmt.Sprintf("redistest: %s not found on PATH (install redis-server and redis-tools)", bin))
			return
		}
	}
}

// Server is one redis-server process.
type Server struct {
	Port        int
	dir         string
	cluster     bool
	nodeTimeout time.Duration // cluster-node-timeout of a cluster node
	monitor     string        // sentinel: "<master name> <host> <port>"
	replicaOf   string        // replica: "<host> <port>" of its master
	// TLSPort is the server's TLS port (0 without TLS). The plain Port stays open for the
	// harness (PING, CLUSTER INFO, ACL SETUSER); the code under test dials TLSPort.
	TLSPort int
	tls     *TLS
	extra   []string // more redis-server arguments

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Standalone starts a new standalone redis-server for this test and stops it at t.Cleanup.
func Standalone(t testing.TB) (addr string, r *Server) {
	t.Helper()
	Require(t)
	s, err := newServer(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.Addr(), s
}

// Cluster starts a new 3-master Redis Cluster for this test, waits until every node reports
// cluster_state:ok, and stops it at t.Cleanup. It returns the nodes' addresses.
func Cluster(t testing.TB) []string {
	t.Helper()
	return StartCluster(t, ClusterOptions{}).Addrs()
}

// ClusterOptions shape a cluster started by StartCluster.
type ClusterOptions struct {
	Replicas    int           // replicas per master (0: masters only)
	NodeTimeout time.Duration // cluster-node-timeout; default 5 s
	// Forming returns as soon as the first node reports cluster_state:ok, while the others
	// may still be converging: the moment a gateway started right after the cluster sees.
	Forming bool
	// TLS serves every node over TLS too, with tls-cluster yes (the bus and the announced
	// client ports are TLS); nil = plain only.
	TLS *TLS
	// ExtraArgs are more redis-server arguments for every node (such as a --user).
	ExtraArgs []string
}

// ClusterNodes is a running Redis Cluster: three masters and their replicas.
type ClusterNodes struct {
	Nodes []*Server // masters first (in slot order: Nodes[0] serves slots 0–5460), then replicas
}

// Addrs returns every node's address.
func (c *ClusterNodes) Addrs() []string { return addrs(c.Nodes) }

// StartCluster starts a Redis Cluster of three masters for this test and stops it at
// t.Cleanup. Unless opts.Forming, it returns once every node reports cluster_state:ok.
func StartCluster(t testing.TB, opts ClusterOptions) *ClusterNodes {
	t.Helper()
	Require(t)
	nodes, err := newClusterWith(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAll(nodes) })
	return &ClusterNodes{Nodes: nodes}
}

// Master returns the server that currently serves slot as a master, asking node 0..n until one
// answers CLUSTER SLOTS.
func (c *ClusterNodes) Master(slot int) (*Server, error) {
	for _, n := range c.Nodes {
		reply, err := n.Do("CLUSTER", "SLOTS")
		if err != nil {
			continue
		}
		for _, r := range slotRanges(reply) {
			if int64(slot) < r.lo || int64(slot) > r.hi {
				continue
			}
			for _, s := range c.Nodes {
				if int64(s.Port) == r.port {
					return s, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("redistest: no node knows the master of slot %d", slot)
}

// WaitOK waits until every running node reports cluster_state:ok and agrees on one slot map
// (timeout bounds the wait).
func (c *ClusterNodes) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := c.converged()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: cluster not converged within %v: %s", timeout, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *ClusterNodes) converged() (bool, string) {
	var first string
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		info, err := n.do("CLUSTER INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false, fmt.Sprintf("%s: %v %q", n.Addr(), err, lastLines(info, 1))
		}
		slots, err := n.Do("CLUSTER", "SLOTS")
		if err != nil {
			return false, fmt.Sprintf("%s: %v", n.Addr(), err)
		}
		m := masterMap(slots)
		if first == "" {
			first = m
		} else if m != first {
			return false, fmt.Sprintf("%s sees %s, another node %s", n.Addr(), m, first)
		}
	}
	return true, ""
}

// masterMap renders a CLUSTER SLOTS reply as "lo-hi:port ..." (masters only), sorted.
func masterMap(reply any) string {
	ranges := slotRanges(reply)
	parts := make([]string, 0, len(ranges))
	for _, r := range ranges {
		parts = append(parts, fmt.Sprintf("%d-%d:%d", r.lo, r.hi, r.port))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// Sentinel starts a new standalone master and one Sentinel monitoring it as master name
// "mymaster", and stops both at t.Cleanup. It returns the master name, the sentinel's address
// and the master's server.
func Sentinel(t testing.TB) (master, sentinelAddr string, r *Server) {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	m, err := newServer(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	port, err := testnet.FreePortWith(0)
	if err != nil {
		t.Fatal(err)
	}
	sdir := fmt.Sprintf("%s/sentinel-%d", dir, port)
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{Port: port, dir: sdir, monitor: "mymaster 127.0.0.1 " + strconv.Itoa(m.Port)}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(startTimeout)
	for {
		reply, err := s.do("SENTINEL get-master-addr-by-name mymaster")
		if err == nil && strings.HasPrefix(reply, "*2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel does not know its master: %q %v", reply, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "mymaster", s.Addr(), m
}

var shared struct {
	mu         sync.Mutex
	dirs       []string
	standalone *Server
	cluster    []*Server
}

// SharedStandalone returns the address of a standalone server shared by every test of the test
// binary (started on first use). Tests sharing it must use their own key prefixes and must not
// stop it. It stops when the test binary exits; Main also stops it and removes its files.
func SharedStandalone(t testing.TB) string {
	t.Helper()
	Require(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.standalone == nil {
		dir, err := sharedDir()
		if err != nil {
			t.Fatal(err)
		}
		s, err := newServer(dir, false)
		if err != nil {
			t.Fatal(err)
		}
		shared.standalone = s
	}
	return shared.standalone.Addr()
}

// SharedCluster is SharedStandalone for a 3-master Redis Cluster.
func SharedCluster(t testing.TB) []string {
	t.Helper()
	Require(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster == nil {
		dir, err := sharedDir()
		if err != nil {
			t.Fatal(err)
		}
		nodes, err := newCluster(dir)
		if err != nil {
			t.Fatal(err)
		}
		shared.cluster = nodes
	}
	return addrs(shared.cluster)
}

// Main runs the tests and then stops the shared servers and removes their files. Use it from
// TestMain: func TestMain(m *testing.M) { redistest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	if shared.standalone != nil {
		shared.standalone.Stop()
	}
	stopAll(shared.cluster)
	for _, d := range shared.dirs {
		os.RemoveAll(d)
	}
	shared.mu.Unlock()
	os.Exit(code)
}

func sharedDir() (string, error) {
	d, err := os.MkdirTemp("", "redistest-")
	if err == nil {
		shared.dirs = append(shared.dirs, d)
	}
	return d, err
}

// newServer starts a server in its own subdirectory of parent, retrying with another port if
// the chosen one was taken between picking and binding it.
func newServer(parent string, cluster bool) (*Server, error) {
	return startIn(parent, serverOpts{cluster: cluster, nodeTimeout: 5 * time.Second})
}

// serverOpts is how a server started by startIn is configured.
type serverOpts struct {
	cluster     bool
	nodeTimeout time.Duration
	replicaOf   string // "host port", or "" for a master
	tls         *TLS
	extra       []string
}

// startIn starts a server configured by o on a free port in its own subdirectory of parent,
// retrying with another port if the chosen one was taken between picking and binding it.
func startIn(parent string, tmpl serverOpts) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := clusterPort(tmpl.cluster)
		if err != nil {
			return nil, err
		}
		dir := fmt.Sprintf("%s/%d", parent, port)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		s := &Server{
			Port: port, dir: dir, cluster: tmpl.cluster, nodeTimeout: tmpl.nodeTimeout, replicaOf: tmpl.replicaOf,
			tls: tmpl.tls, extra: tmpl.extra,
		}
		if s.tls != nil {
			if s.TLSPort, err = clusterPort(tmpl.cluster); err != nil {
				return nil, err
			}
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Start starts the server (again) on its port. Data is not kept across Stop/Start.
func (s *Server) Start() {
	if err := s.start(); err != nil {
		panic(err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	args := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", "redis.log", "--protected-mode", "no",
	}
	if s.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--repl-diskless-sync-delay", "0",
			"--cluster-node-timeout", strconv.FormatInt(s.nodeTimeout.Milliseconds(), 10))
	}
	if s.replicaOf != "" {
		args = append(append(args, "--replicaof"), strings.Fields(s.replicaOf)...)
	}
	if s.tls != nil {
		args = append(args, s.tls.serverArgs(s.TLSPort, s.cluster)...)
	}
	args = append(args, s.extra...)
	if s.monitor != "" {
		// A sentinel reads (and rewrites) a config file naming the master it monitors.
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nlogfile redis.log\n"+
			"sentinel monitor %s 1\nsentinel down-after-milliseconds %s 1000\n",
			s.Port, s.dir, s.monitor, strings.Fields(s.monitor)[0])
		// 0o600: the sentinel runs as this user; nobody else needs to read the file.
		if err := os.WriteFile(s.dir+"/sentinel.conf", []byte(conf), 0o600); err != nil {
			return err
		}
		args = []string{s.dir + "/sentinel.conf", "--sentinel"}
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = s.dir
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		// The exit status says nothing the tests use: Stop kills the server, and a server that
		// exits on its own is reported from its log below.
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		if reply, err := s.do("PING"); err == nil && reply == "+PONG" {
			s.cmd, s.exited = cmd, exited
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(s.dir + "/redis.log")
			return fmt.Errorf("redistest: redis-server on port %d exited: %s", s.Port, lastLines(string(log), 5))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill() // fails only if the process has exited: <-exited returns either way
			<-exited
			return fmt.Errorf("redistest: redis-server on port %d did not answer PING within %v", s.Port, startTimeout)
		}
	}
}

// Stop kills the server (as a crash would) and waits until it has exited. It is a no-op on a
// stopped server.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // fails only if the process has exited: <-s.exited returns either way
	<-s.exited               // the process is gone and its port released: a following Start can bind it
	s.cmd = nil
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing answers, as with a
// hung server or a network black hole. Resume continues it.
func (s *Server) Pause() { s.signal(pauseSignal) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(resumeSignal) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && sig != nil {
		// An error means the process has exited: there is nothing left to pause or resume.
		_ = s.cmd.Process.Signal(sig)
	}
}

// do sends one inline command and returns the first line of the reply (for simple replies) or
// the whole bulk string (for bulk replies).
func (s *Server) do(cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "$") {
		return line, nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return line, err
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func newCluster(parent string) ([]*Server, error) {
	return newClusterWith(parent, ClusterOptions{})
}

func newClusterWith(parent string, opts ClusterOptions) ([]*Server, error) {
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = 5 * time.Second
	}
	var nodes []*Server
	for i := 0; i < 3*(1+opts.Replicas); i++ {
		s, err := startIn(parent, serverOpts{cluster: true, nodeTimeout: opts.NodeTimeout, tls: opts.TLS, extra: opts.ExtraArgs})
		if err != nil {
			stopAll(nodes)
			return nil, err
		}
		nodes = append(nodes, s)
	}
	var args []string
	create := addrs(nodes)
	if opts.TLS != nil {
		// With tls-cluster the nodes meet and announce each other on their TLS ports.
		args = opts.TLS.cliArgs()
		create = TLSAddrs(nodes)
	}
	args = append(append(args, "--cluster", "create"), create...)
	args = append(args, "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")
	createCmd := exec.Command("redis-cli", args...)
	var out strings.Builder
	createCmd.Stdout, createCmd.Stderr = &out, &out
	if err := createCmd.Start(); err != nil {
		stopAll(nodes)
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v", err)
	}
	created := make(chan error, 1)
	go func() { created <- createCmd.Wait() }()
	if !opts.Forming {
		if err := <-created; err != nil {
			stopAll(nodes)
			return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v: %s", err, lastLines(out.String(), 5))
		}
	}
	// redis-cli makes the first three nodes the masters, in slot order.
	deadline := time.Now().Add(startTimeout)
	for _, s := range nodes {
		for {
			info, err := s.do("CLUSTER INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				stopAll(nodes)
				return nil, fmt.Errorf("redistest: cluster node %s not ok within %v: %v %s", s.Addr(), startTimeout, err, info)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if opts.Forming {
			return nodes, nil // the first node is ok; the others may still be converging
		}
	}
	if opts.Replicas > 0 {
		c := &ClusterNodes{Nodes: nodes}
		if err := c.WaitOK(startTimeout); err != nil {
			stopAll(nodes)
			return nil, err
		}
		// A replica that never synced with its master is not promoted when the master dies.
		for _, r := range nodes[3:] {
			for {
				info, err := r.do("INFO replication")
				if err == nil && strings.Contains(info, "master_link_status:up") {
					break
				}
				if time.Now().After(deadline) {
					stopAll(nodes)
					return nil, fmt.Errorf("redistest: replica %s not synced within %v", r.Addr(), startTimeout)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	return nodes, nil
}

func stopAll(nodes []*Server) {
	for _, s := range nodes {
		s.Stop()
	}
}

func addrs(nodes []*Server) []string {
	out := make([]string, len(nodes))
	for i, s := range nodes {
		out[i] = s.Addr()
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Slow skips a long-running test under -short, except in CI (the environment variable CI set),
// where skipping would hide what the test checks: there it fails instead.
func Slow(t testing.TB, why string) {
	t.Helper()
	if !testing.Short() {
		return
	}
	testenv.Missing(t, "redistest: "+why+" (CI must not run it with -short)")
}

// clusterPort is a free port; a cluster node also needs port+10000 (its bus port).
func clusterPort(cluster bool) (int, error) {
	if cluster {
		return testnet.FreePortWith(10000)
	}
	return testnet.FreePortWith(0)
}
