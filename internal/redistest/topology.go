package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// topologyTimeout bounds a failover or a slot migration (polling, no fixed sleeps).
const topologyTimeout = 20 * time.Second

// role is a node's answer to ROLE: "master", "slave" or "sentinel", and for a replica the port
// of its master.
type role struct {
	name       string
	masterHost string
	masterPort int
}

func (s *Server) role() (role, error) {
	reply, err := s.Do("ROLE")
	if err != nil {
		return role{}, fmt.Errorf("redistest: ROLE on %s: %w", s.Addr(), err)
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) == 0 {
		return role{}, fmt.Errorf("redistest: ROLE on %s: unexpected reply %v", s.Addr(), reply)
	}
	name, _ := arr[0].(string)
	r := role{name: name}
	if name == "slave" {
		if len(arr) < 3 {
			return role{}, fmt.Errorf("redistest: ROLE on %s: short replica reply %v", s.Addr(), reply)
		}
		r.masterHost, _ = arr[1].(string)
		port, _ := arr[2].(int64)
		r.masterPort = int(port)
	}
	return r, nil
}

// ReplicaOf returns the running node that currently replicates master (asking each node ROLE).
// It works for a stopped master too: its replica still names it.
func (c *ClusterNodes) ReplicaOf(master *Server) (*Server, error) {
	var errs []error
	for _, n := range c.Nodes {
		if n == master || !n.Running() {
			continue
		}
		r, err := n.role()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.name == "slave" && r.masterPort == master.Port {
			return n, nil
		}
	}
	return nil, fmt.Errorf("redistest: no running node replicates %s: %w", master.Addr(), errors.Join(errs...))
}

// Failover makes master's replica take over with a manual failover (CLUSTER FAILOVER; CLUSTER
// FAILOVER FORCE if master is stopped, since then it cannot take part) and waits until the
// replica reports role master, every running node names it as the master of master's former
// slots, and every running node reports cluster_state:ok. It returns the new master.
func (c *ClusterNodes) Failover(master *Server) (*Server, error) {
	deadline := time.Now().Add(topologyTimeout)
	replica, err := c.ReplicaOf(master)
	if err != nil {
		return nil, err
	}
	slots, err := c.slotsOf(master.Port)
	if err != nil {
		return nil, err
	}
	args := []string{"CLUSTER", "FAILOVER"}
	if !master.Running() {
		args = append(args, "FORCE")
	}
	if _, err := replica.Do(args...); err != nil {
		return nil, fmt.Errorf("redistest: %s on %s: %w", strings.Join(args, " "), replica.Addr(), err)
	}
	// A manual failover that does not complete within Redis's own limit (5 s: the replica
	// could not catch up, as on a loaded machine) is abandoned by Redis; ask again.
	asked := time.Now()
	var why string
	for {
		r, err := replica.role()
		switch {
		case err != nil:
			why = err.Error()
		case r.name != "master":
			why = fmt.Sprintf("%s still has role %s", replica.Addr(), r.name)
		default:
			why = c.agreeOnMaster(slots, replica.Port)
		}
		if why == "" {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redistest: failover of %s to %s not done within %v: %s",
				master.Addr(), replica.Addr(), topologyTimeout, why)
		}
		if time.Since(asked) > 6*time.Second {
			if _, err := replica.Do(args...); err == nil {
				asked = time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.WaitOK(time.Until(deadline)); err != nil {
		return nil, fmt.Errorf("redistest: after failover of %s to %s: %w", master.Addr(), replica.Addr(), err)
	}
	return replica, nil
}

// slotsOf returns the slots that the master on port serves, according to the first node that
// answers CLUSTER SLOTS.
func (c *ClusterNodes) slotsOf(port int) ([][2]int64, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		reply, err := n.Do("CLUSTER", "SLOTS")
		if err != nil {
			continue
		}
		var out [][2]int64
		for _, rng := range slotRanges(reply) {
			if rng.port == int64(port) {
				out = append(out, [2]int64{rng.lo, rng.hi})
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("redistest: %s says port %d serves no slot", n.Addr(), port)
		}
		return out, nil
	}
	return nil, errors.New("redistest: no running node answers CLUSTER SLOTS")
}

// agreeOnMaster returns "" once every running node names port as the master of every slot range
// in slots, or else why not.
func (c *ClusterNodes) agreeOnMaster(slots [][2]int64, port int) string {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		reply, err := n.Do("CLUSTER", "SLOTS")
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER SLOTS: %v", n.Addr(), err)
		}
		ranges := slotRanges(reply)
		for _, want := range slots {
			for slot := want[0]; slot <= want[1]; slot++ {
				got := int64(-1)
				for _, r := range ranges {
					if slot >= r.lo && slot <= r.hi {
						got = r.port
						break
					}
				}
				if got != int64(port) {
					return fmt.Sprintf("%s sees slot %d served by port %d, want %d", n.Addr(), slot, got, port)
				}
			}
		}
	}
	return ""
}

type slotRange struct{ lo, hi, port int64 }

// slotRanges parses a CLUSTER SLOTS reply into ranges and their masters' ports.
func slotRanges(reply any) []slotRange {
	var out []slotRange
	rs, _ := reply.([]any)
	for _, r := range rs {
		rng, _ := r.([]any)
		if len(rng) < 3 {
			continue
		}
		m, _ := rng[2].([]any)
		if len(m) < 2 {
			continue
		}
		lo, _ := rng[0].(int64)
		hi, _ := rng[1].(int64)
		port, _ := m[1].(int64)
		out = append(out, slotRange{lo, hi, port})
	}
	return out
}

// MigrateSlot moves slot from its current master to the master `to`, the way redis-cli
// --cluster reshard does: it marks the slot IMPORTING on `to` and MIGRATING on the source, sleeps
// pause (during which clients get ASK redirects for keys created meanwhile: the fault's
// duration), moves the keys with MIGRATE in batches of 100, then assigns the slot to `to` on the
// target, the source and every other running master, and waits until the cluster agrees.
func (c *ClusterNodes) MigrateSlot(slot int, to *Server, pause time.Duration) error {
	if slot < 0 || slot > 16383 {
		return fmt.Errorf("redistest: MigrateSlot: slot %d out of range", slot)
	}
	from, err := c.Master(slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("redistest: MigrateSlot: %s already serves slot %d", to.Addr(), slot)
	}
	if r, err := to.role(); err != nil {
		return err
	} else if r.name != "master" {
		return fmt.Errorf("redistest: MigrateSlot: target %s has role %s, want master", to.Addr(), r.name)
	}
	fromID, err := nodeID(from)
	if err != nil {
		return err
	}
	toID, err := nodeID(to)
	if err != nil {
		return err
	}
	s := strconv.Itoa(slot)
	if _, err := to.Do("CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		return fmt.Errorf("redistest: CLUSTER SETSLOT %s IMPORTING on %s: %w", s, to.Addr(), err)
	}
	if _, err := from.Do("CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return fmt.Errorf("redistest: CLUSTER SETSLOT %s MIGRATING on %s: %w", s, from.Addr(), err)
	}
	time.Sleep(pause)

	deadline := time.Now().Add(topologyTimeout)
	moved := 0
	for {
		reply, err := from.Do("CLUSTER", "GETKEYSINSLOT", s, "100")
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT %s on %s: %w", s, from.Addr(), err)
		}
		keys, ok := reply.([]any)
		if !ok {
			return fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT %s on %s: unexpected reply %v", s, from.Addr(), reply)
		}
		if len(keys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: slot %d still has keys on %s after moving %d within %v",
				slot, from.Addr(), moved, topologyTimeout)
		}
		args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(to.Port), "", "0", "5000", "KEYS"}
		for _, k := range keys {
			key, _ := k.(string)
			args = append(args, key)
		}
		if _, err := from.Do(args...); err != nil {
			return fmt.Errorf("redistest: MIGRATE of %d keys of slot %d from %s to %s: %w",
				len(keys), slot, from.Addr(), to.Addr(), err)
		}
		moved += len(keys)
	}

	// The target first (it bumps its config epoch), then the source (which stops answering ASK
	// and answers MOVED), then every other master.
	assign := []*Server{to, from}
	for _, n := range c.Nodes {
		if n == to || n == from || !n.Running() {
			continue
		}
		if r, err := n.role(); err == nil && r.name == "master" {
			assign = append(assign, n)
		}
	}
	for _, n := range assign {
		if _, err := n.Do("CLUSTER", "SETSLOT", s, "NODE", toID); err != nil {
			return fmt.Errorf("redistest: CLUSTER SETSLOT %s NODE %s on %s: %w", s, toID, n.Addr(), err)
		}
	}
	if err := c.WaitOK(topologyTimeout); err != nil {
		return fmt.Errorf("redistest: after migrating slot %d from %s to %s: %w", slot, from.Addr(), to.Addr(), err)
	}
	return nil
}

func nodeID(s *Server) (string, error) {
	reply, err := s.Do("CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("redistest: CLUSTER MYID on %s: %w", s.Addr(), err)
	}
	id, ok := reply.(string)
	if !ok || id == "" {
		return "", fmt.Errorf("redistest: CLUSTER MYID on %s: unexpected reply %v", s.Addr(), reply)
	}
	return id, nil
}

// SentinelWithReplica starts a standalone master, a replica of it, and one Sentinel monitoring
// them as master name "mymaster" (quorum 1, down-after-milliseconds 1000, failover-timeout
// 5000), and stops all three at t.Cleanup. It returns once the replica is in sync and the
// sentinel knows it as a healthy replica, so that a failover can promote it at once.
//
// The replica is started with --replicaof: restarted with Start, it replicates the original
// master again.
func SentinelWithReplica(t testing.TB) (master, sentinelAddr string, primary, replica *Server) {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	m, err := newServer(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	// A diskless full sync otherwise waits repl-diskless-sync-delay (5 s by default) for more
	// replicas to join it.
	if _, err := m.Do("CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatalf("redistest: CONFIG SET repl-diskless-sync-delay on %s: %v", m.Addr(), err)
	}
	r, err := newReplica(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	if err := waitFor(startTimeout, func() string {
		info, err := r.do("INFO replication")
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return fmt.Sprintf("replica %s not in sync: %v %s", r.Addr(), err, info)
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	s, err := newSentinel(dir, "mymaster", m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if _, err := s.Do("SENTINEL", "SET", "mymaster", "failover-timeout", "5000"); err != nil {
		t.Fatalf("redistest: SENTINEL SET mymaster failover-timeout: %v", err)
	}
	if err := waitFor(startTimeout, func() string {
		reply, err := s.Do("SENTINEL", "REPLICAS", "mymaster")
		if err != nil {
			return err.Error()
		}
		for _, e := range asList(reply) {
			f := fields(e)
			if f["port"] == strconv.Itoa(r.Port) && f["flags"] == "slave" && f["master-link-status"] == "ok" {
				return ""
			}
		}
		return fmt.Sprintf("sentinel %s does not know replica %s as healthy: %v", s.Addr(), r.Addr(), reply)
	}); err != nil {
		t.Fatal(err)
	}
	return "mymaster", s.Addr(), m, r
}

// newReplica starts a standalone replica of master in its own subdirectory of parent.
func newReplica(parent string, master *Server) (*Server, error) {
	return startIn(parent, serverOpts{replicaOf: "127.0.0.1 " + strconv.Itoa(master.Port)})
}

// newSentinel starts a sentinel monitoring master as name, in its own subdirectory of parent,
// and waits until it knows its master's address.
func newSentinel(parent, name string, master *Server) (*Server, error) {
	var s *Server
	var lastErr error
	for attempt := 0; attempt < 5 && s == nil; attempt++ {
		port, err := testnet.FreePortWith(0)
		if err != nil {
			return nil, err
		}
		dir := fmt.Sprintf("%s/sentinel-%d", parent, port)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		c := &Server{Port: port, dir: dir, monitor: name + " 127.0.0.1 " + strconv.Itoa(master.Port)}
		if lastErr = c.start(); lastErr == nil {
			s = c
		}
	}
	if s == nil {
		return nil, lastErr
	}
	if err := waitFor(startTimeout, func() string {
		reply, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
		if err != nil || len(asList(reply)) != 2 {
			return fmt.Sprintf("sentinel %s does not know its master: %v %v", s.Addr(), reply, err)
		}
		return ""
	}); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// ForceSentinelFailover asks the sentinel at sentinelAddr to fail "mymaster" over (SENTINEL
// FAILOVER, retried while the sentinel has no good replica yet) and waits until SENTINEL
// GET-MASTER-ADDR-BY-NAME no longer names oldMaster, or timeout.
func ForceSentinelFailover(sentinelAddr string, oldMaster *Server, timeout time.Duration) error {
	s, err := serverAt(sentinelAddr)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		_, err := s.Do("SENTINEL", "FAILOVER", "mymaster")
		if err == nil || strings.HasPrefix(err.Error(), "INPROG") {
			break
		}
		var re replyError
		if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), "NOGOOD") || time.Now().After(deadline) {
			return fmt.Errorf("redistest: SENTINEL FAILOVER mymaster on %s: %w", sentinelAddr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	old := strconv.Itoa(oldMaster.Port)
	return waitFor(time.Until(deadline), func() string {
		reply, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
		if err != nil {
			return fmt.Sprintf("SENTINEL GET-MASTER-ADDR-BY-NAME mymaster on %s: %v", sentinelAddr, err)
		}
		addr := asList(reply)
		if len(addr) != 2 {
			return fmt.Sprintf("SENTINEL GET-MASTER-ADDR-BY-NAME mymaster on %s: unexpected reply %v", sentinelAddr, reply)
		}
		if port, _ := addr[1].(string); port == old {
			return fmt.Sprintf("sentinel %s still names %s as the master of mymaster", sentinelAddr, oldMaster.Addr())
		}
		return ""
	})
}

// serverAt returns a Server value for a running loopback server at addr, for Do; it does not
// own (and cannot Stop) the process.
func serverAt(addr string) (*Server, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("redistest: address %q: %w", addr, err)
	}
	if host != "127.0.0.1" && host != "localhost" {
		return nil, fmt.Errorf("redistest: address %q: not a loopback address of the harness", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("redistest: address %q: bad port", addr)
	}
	return &Server{Port: port}, nil
}

// waitFor polls cond (which returns "" when satisfied, or else why not) every 20 ms until it is
// satisfied or timeout has passed.
func waitFor(timeout time.Duration, cond func() string) error {
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: not within %v: %s", timeout, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func asList(reply any) []any {
	l, _ := reply.([]any)
	return l
}

// fields turns a flat [name, value, name, value, ...] reply (as in SENTINEL REPLICAS) into a
// map.
func fields(reply any) map[string]string {
	l := asList(reply)
	m := make(map[string]string, len(l)/2)
	for i := 0; i+1 < len(l); i += 2 {
		k, _ := l[i].(string)
		v, _ := l[i+1].(string)
		m[k] = v
	}
	return m
}
