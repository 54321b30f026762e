package redistest

import (
	"fmt"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestStandaloneStopStart(t *testing.T) {
	addr, s := Standalone(t)
	if reply, err := s.do("SET k v"); err != nil || reply != "+OK" {
		t.Fatalf("SET on %s: %q %v", addr, reply, err)
	}
	s.Stop()
	if _, err := s.do("PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Start()
	if reply, err := s.do("GET k"); err != nil || reply != "$-1" {
		t.Fatalf("after restart GET k = %q, %v; want a nil reply (no persistence)", reply, err)
	}
}

func TestCluster(t *testing.T) {
	nodes := SharedCluster(t)
	if len(nodes) != 3 {
		t.Fatalf("got %d nodes", len(nodes))
	}
	for _, a := range nodes {
		s := &Server{Port: portOf(t, a)}
		info, err := s.do("CLUSTER INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_size:3") {
			t.Fatalf("%s: %v %s", a, err, info)
		}
	}
	if again := SharedCluster(t); again[0] != nodes[0] {
		t.Fatalf("SharedCluster started a second cluster: %v vs %v", again, nodes)
	}
}

func TestSharedStandalone(t *testing.T) {
	a, b := SharedStandalone(t), SharedStandalone(t)
	if a != b {
		t.Fatalf("two shared servers: %s %s", a, b)
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	var p int
	if _, err := fmt.Sscanf(addr[strings.LastIndex(addr, ":")+1:], "%d", &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSentinel(t *testing.T) {
	name, addr, master := Sentinel(t)
	s := &Server{Port: portOf(t, addr)}
	reply, err := s.do("SENTINEL master " + name)
	if err != nil || !strings.HasPrefix(reply, "*") {
		t.Fatalf("SENTINEL master %s: %q %v", name, reply, err)
	}
	if reply, err := master.do("PING"); err != nil || reply != "+PONG" {
		t.Fatalf("master: %q %v", reply, err)
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of stopping the goroutine.
type recorder struct {
	testing.TB
	skipped, failed []string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = append(r.skipped, fmt.Sprint(args...)) }
func (r *recorder) Fatal(args ...any) { r.failed = append(r.failed, fmt.Sprint(args...)) }

func TestRequireWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server here
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Require(r)
	if len(r.skipped) == 0 || len(r.failed) != 0 || !strings.Contains(r.skipped[0], "redis-server not found") {
		t.Fatalf("without CI: skipped %q, failed %q; want a skip naming redis-server", r.skipped, r.failed)
	}
	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	Require(r)
	if len(r.failed) == 0 || len(r.skipped) != 0 {
		t.Fatalf("under CI: skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
}

func TestPauseResume(t *testing.T) {
	_, s := Standalone(t)
	s.Pause()
	if _, err := s.do("PING"); err == nil {
		t.Fatal("a paused server answered")
	}
	s.Resume()
	if reply, err := s.do("PING"); err != nil || reply != "+PONG" {
		t.Fatalf("after Resume: %q %v", reply, err)
	}
}
