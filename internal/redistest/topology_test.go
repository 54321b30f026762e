package redistest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestClusterFailover(t *testing.T) {
	c := StartCluster(t, ClusterOptions{Replicas: 1, NodeTimeout: 2 * time.Second})
	master := c.Nodes[0]
	replica, err := c.ReplicaOf(master)
	if err != nil {
		t.Fatal(err)
	}
	if replica == master || replica.Port == c.Nodes[1].Port || replica.Port == c.Nodes[2].Port {
		t.Fatalf("ReplicaOf(%s) = %s, a master", master.Addr(), replica.Addr())
	}

	start := time.Now()
	promoted, err := c.Failover(master)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manual failover of %s to %s took %v", master.Addr(), promoted.Addr(), time.Since(start))
	if promoted != replica {
		t.Fatalf("Failover promoted %s, want the replica %s", promoted.Addr(), replica.Addr())
	}
	if m, err := c.Master(0); err != nil || m != promoted {
		t.Fatalf("Master(0) = %v, %v; want %s", m, err, promoted.Addr())
	}
	// The old master turns into a replica of the new one.
	if err := waitFor(5*time.Second, func() string {
		if r, err := c.ReplicaOf(promoted); err != nil || r != master {
			return fmt.Sprintf("ReplicaOf(new master) = %v, %v; want %s", r, err, master.Addr())
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}

	// A stopped master is failed over with FORCE.
	dead := c.Nodes[1]
	dead.Stop()
	start = time.Now()
	promoted, err = c.Failover(dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forced failover of stopped %s to %s took %v", dead.Addr(), promoted.Addr(), time.Since(start))
	if m, err := c.Master(5461); err != nil || m != promoted {
		t.Fatalf("Master(5461) = %v, %v; want %s", m, err, promoted.Addr())
	}
}

func TestMigrateSlot(t *testing.T) {
	c := StartCluster(t, ClusterOptions{})
	ctx := context.Background()
	reply, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", "{mig}")
	if err != nil {
		t.Fatal(err)
	}
	slot := int(reply.(int64))
	from, err := c.Master(slot)
	if err != nil {
		t.Fatal(err)
	}
	var to *Server
	for _, n := range c.Nodes[:3] {
		if n != from {
			to = n
			break
		}
	}

	if err := c.MigrateSlot(slot, from, 0); err == nil {
		t.Fatal("MigrateSlot to the slot's own master succeeded")
	}
	if err := c.MigrateSlot(16384, to, 0); err == nil {
		t.Fatal("MigrateSlot of slot 16384 succeeded")
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	const n = 250 // more than one GETKEYSINSLOT batch
	key := func(i int) string { return "{mig}:" + strconv.Itoa(i) }
	for i := 0; i < n; i++ {
		if err := cc.Set(ctx, key(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Read the keys through the client all along the migration: ASK and then MOVED redirects
	// must be followed.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	var readErrs []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := key(i % n)
			v, err := cc.Get(ctx, k).Int()
			if err == nil && v != i%n {
				err = fmt.Errorf("GET %s = %d", k, v)
			}
			if err != nil && len(readErrs) < 5 {
				readErrs = append(readErrs, err)
			}
			reads.Add(1)
		}
	}()

	migrated := make(chan error, 1)
	start := time.Now()
	go func() { migrated <- c.MigrateSlot(slot, to, 300*time.Millisecond) }()
	// A key created while the slot is migrating goes to the target (ASK redirect).
	time.Sleep(100 * time.Millisecond)
	if err := cc.Set(ctx, "{mig}:new", "x", 0).Err(); err != nil {
		t.Errorf("SET during migration: %v", err)
	}
	if err := <-migrated; err != nil {
		t.Fatal(err)
	}
	t.Logf("migrating slot %d (%d keys) from %s to %s took %v", slot, n+1, from.Addr(), to.Addr(), time.Since(start))
	close(stop)
	wg.Wait()
	if len(readErrs) > 0 {
		t.Errorf("%d reads during the migration; errors: %v", reads.Load(), readErrs)
	}

	if m, err := c.Master(slot); err != nil || m != to {
		t.Fatalf("Master(%d) = %v, %v; want %s", slot, m, err, to.Addr())
	}
	if got, err := to.Do("CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)); err != nil || got != int64(n+1) {
		t.Fatalf("target has %v keys in slot %d (%v); want %d", got, slot, err, n+1)
	}
	if got, err := from.Do("CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)); err != nil || got != int64(0) {
		t.Fatalf("source still has %v keys in slot %d (%v)", got, slot, err)
	}
	for i := 0; i < n; i++ {
		if v, err := cc.Get(ctx, key(i)).Int(); err != nil || v != i {
			t.Fatalf("GET %s = %d, %v after migration", key(i), v, err)
		}
	}
	if v, err := cc.Get(ctx, "{mig}:new").Result(); err != nil || v != "x" {
		t.Fatalf("GET {mig}:new = %q, %v after migration", v, err)
	}
}

func TestSentinelWithReplica(t *testing.T) {
	name, addr, primary, replica := SentinelWithReplica(t)
	if name != "mymaster" {
		t.Fatalf("master name %q", name)
	}
	if r, err := primary.role(); err != nil || r.name != "master" {
		t.Fatalf("primary role %+v, %v", r, err)
	}
	if r, err := replica.role(); err != nil || r.name != "slave" || r.masterPort != primary.Port {
		t.Fatalf("replica role %+v, %v; want a replica of port %d", r, err, primary.Port)
	}
	if _, err := primary.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(5*time.Second, func() string {
		if v, err := replica.Do("GET", "k"); err != nil || v != "v" {
			return fmt.Sprintf("replica GET k = %v, %v", v, err)
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := ForceSentinelFailover(addr, primary, 12*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("sentinel failover took %v", time.Since(start))
	s, err := serverAt(addr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
	if err != nil {
		t.Fatal(err)
	}
	if l := asList(got); len(l) != 2 || l[1] != strconv.Itoa(replica.Port) {
		t.Fatalf("sentinel names %v as master, want port %d", got, replica.Port)
	}
	if r, err := replica.role(); err != nil || r.name != "master" {
		t.Fatalf("promoted replica role %+v, %v", r, err)
	}
	if v, err := replica.Do("GET", "k"); err != nil || v != "v" {
		t.Fatalf("promoted replica GET k = %v, %v", v, err)
	}
}

func TestServerAt(t *testing.T) {
	for _, bad := range []string{"nohost", "10.0.0.1:6379", "127.0.0.1:x", "127.0.0.1:0"} {
		if _, err := serverAt(bad); err == nil {
			t.Errorf("serverAt(%q) succeeded", bad)
		}
	}
	if s, err := serverAt("127.0.0.1:6380"); err != nil || s.Port != 6380 {
		t.Errorf("serverAt = %v, %v", s, err)
	}
}
