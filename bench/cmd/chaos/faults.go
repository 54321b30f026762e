package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ran is what happened in one episode.
type ran struct {
	episode
	start, healed time.Duration // since the run's start
	recovery      time.Duration // from healed until every gateway up was at level 0
	recovered     bool
	leftFailOpen  time.Duration // from healed until no gateway up was in fail_open (-1: never)
	errs          []string
	killLoss      int64 // 2xx answers of gateways SIGKILLed in the last 2 s before the kill
	partitioned   []int // gateways cut from Redis
}

// chaos runs the schedule against the fleet.
type chaos struct {
	top   *topology
	gws   []*gateway
	load  *loader
	start time.Time
}

func (c *chaos) since() time.Duration { return time.Since(c.start) }

// runEpisode injects the episode's faults at once, heals each after its hold, waits until the
// Redis deployment is healthy and every gateway is up, then measures the recovery of the
// degradation levels.
func (c *chaos) runEpisode(e episode) *ran {
	r := &ran{episode: e, start: c.since()}
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		r.errs = append(r.errs, err.Error())
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, f := range e.faults {
		if f.kind == partition {
			r.partitioned = append(r.partitioned, f.target)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.inject(f, r, &mu); err != nil {
				fail(fmt.Errorf("%s: %w", f, err))
			}
		}()
	}
	wg.Wait()
	r.healed = c.since()
	if err := c.top.waitHealthy(60 * time.Second); err != nil {
		fail(err)
	}
	for _, g := range c.gws {
		if !g.up.Load() {
			if err := g.start(); err != nil {
				fail(err)
			}
		}
	}
	healedAt := time.Now()
	deadline := healedAt.Add(60 * time.Second)
	r.leftFailOpen = -1
	for time.Now().Before(deadline) {
		lvl := c.highestLevel()
		if lvl < levelFailOpen && r.leftFailOpen < 0 {
			r.leftFailOpen = time.Since(healedAt)
		}
		if lvl == 0 {
			r.recovered = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.recovery = time.Since(healedAt)
	return r
}

// levelFailOpen is caddy_rate_limit_degradation_level in fail_open.
const levelFailOpen = 3

// highestLevel is the highest degradation level of the gateways up (fail_open if one cannot be
// read).
func (c *chaos) highestLevel() float64 {
	var lvl float64
	for _, g := range c.gws {
		if !g.up.Load() {
			continue
		}
		m, err := scrape(g)
		if err != nil {
			return levelFailOpen
		}
		lvl = max(lvl, m.level)
	}
	return lvl
}

// allNormal reports whether every gateway up reports degradation level 0.
func (c *chaos) allNormal() bool { return c.highestLevel() == 0 }

// inject applies one fault, holds it, and heals it.
func (c *chaos) inject(f fault, r *ran, mu *sync.Mutex) error {
	switch f.kind {
	case gwKill, gwTerm:
		g := c.gws[f.target]
		sig := syscall.SIGTERM
		if f.kind == gwKill {
			sig = syscall.SIGKILL
			loss := c.load.admittedBefore(f.target, c.since(), 2)
			mu.Lock()
			r.killLoss += loss
			mu.Unlock()
		}
		g.stop(sig)
		time.Sleep(f.hold)
		return g.start()
	case gwReload:
		g := c.gws[f.target]
		var errs []error
		for i := range f.param {
			if g.up.Load() {
				errs = append(errs, g.reload(i%2 == 0))
			}
			time.Sleep(f.hold / time.Duration(f.param))
		}
		return errors.Join(errs...)
	case latency:
		for _, p := range c.top.proxies() {
			p.SetLatency(time.Duration(f.param) * time.Millisecond)
		}
		time.Sleep(f.hold)
		for _, p := range c.top.proxies() {
			p.SetLatency(0)
		}
		return nil
	case resets:
		end := time.Now().Add(f.hold)
		for time.Now().Before(end) {
			for _, p := range c.top.proxies() {
				p.ResetAll()
			}
			time.Sleep(300 * time.Millisecond)
		}
		return nil
	case partition:
		g := c.gws[f.target]
		cut := func(conn net.Conn) bool { return ownedBy(conn, int(g.pid.Load())) }
		for _, p := range c.top.proxies() {
			p.Partition(cut)
		}
		time.Sleep(f.hold)
		for _, p := range c.top.proxies() {
			p.Partition(nil)
		}
		return nil
	case masterKill:
		return c.killMaster(f)
	case failover:
		return c.failover(f)
	case migrate:
		return c.migrate(f)
	}
	return fmt.Errorf("unknown fault %q", f.kind)
}

// killMaster SIGKILLs a master, waits (at least the hold) until a replica has taken over, then
// starts the old master again: it rejoins as a replica.
func (c *chaos) killMaster(f fault) error {
	victim, err := c.pickMaster(f.target)
	if err != nil {
		return err
	}
	victim.kill()
	time.Sleep(f.hold)
	deadline := time.Now().Add(30 * time.Second)
	for !c.tookOver(victim) {
		if time.Now().After(deadline) {
			_ = victim.start()
			return fmt.Errorf("no replica took over from %s within 30 s", victim.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return victim.start()
}

// tookOver reports whether a replica serves what the stopped victim served: the sentinels name
// another master; in a cluster, the others mark the victim failed and every running node is ok.
func (c *chaos) tookOver(victim *node) bool {
	if c.top.mode == "sentinel" {
		m, err := c.top.sentinelMaster()
		return err == nil && m != victim
	}
	cns, err := c.top.clusterNodes()
	if err != nil {
		return false
	}
	for _, cn := range cns {
		if cn.node == victim && !cn.fail {
			return false
		}
	}
	return c.top.healthy() == nil
}

// pickMaster is the running master number i (mod the masters) in node order.
func (c *chaos) pickMaster(i int) (*node, error) {
	if c.top.mode == "sentinel" {
		return c.top.sentinelMaster()
	}
	cns, err := c.top.clusterNodes()
	if err != nil {
		return nil, err
	}
	var masters []*node
	for _, n := range c.top.data {
		for _, cn := range cns {
			if cn.node == n && cn.master && !cn.fail && n.running() {
				masters = append(masters, n)
			}
		}
	}
	if len(masters) == 0 {
		return nil, errors.New("no running master")
	}
	return masters[i%len(masters)], nil
}

// failover promotes a replica by hand: CLUSTER FAILOVER on a replica of master number target,
// or SENTINEL FAILOVER; it waits (at least the hold) until the deployment is healthy again.
func (c *chaos) failover(f fault) error {
	old, err := c.pickMaster(f.target)
	if err != nil {
		return err
	}
	ask, err := c.askFailover(old, f.target)
	if err != nil {
		return err
	}
	// Redis may refuse the failover while another fault holds the replica back (NOGOODSLAVE
	// while its link is being reset): asked again below.
	askErr := ask()
	time.Sleep(f.hold)
	// A failover Redis gave up (the replica could not catch up, its link reset by another
	// fault) is asked again, as an operator would; one that happened is not asked again.
	asked := time.Now()
	deadline := time.Now().Add(45 * time.Second)
	for {
		moved := c.movedAway(old)
		if moved && c.top.healthy() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("failover away from %s not done within 45 s (moved away: %v; %v; first answer: %v)", old.name, moved, c.top.healthy(), askErr)
		}
		if !moved && time.Since(asked) > 8*time.Second {
			if err := ask(); err != nil && askErr == nil {
				askErr = err
			}
			asked = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// movedAway reports whether old no longer serves as the master: the sentinels name another
// one, or (cluster) old reports the replica role.
func (c *chaos) movedAway(old *node) bool {
	if c.top.mode == "sentinel" {
		m, err := c.top.sentinelMaster()
		return err == nil && m != old
	}
	return c.promoted(old)
}

// askFailover returns the command that asks for a failover away from old: SENTINEL FAILOVER on
// a sentinel, or CLUSTER FAILOVER on a replica of old.
func (c *chaos) askFailover(old *node, target int) (func() error, error) {
	ctx := context.Background()
	if c.top.mode == "sentinel" {
		s := c.top.sentinels[target%len(c.top.sentinels)]
		return func() error {
			if err := s.cl.Do(ctx, "SENTINEL", "FAILOVER", sentinelMaster).Err(); err != nil {
				return fmt.Errorf("SENTINEL FAILOVER: %w", err)
			}
			return nil
		}, nil
	}
	cns, err := c.top.clusterNodes()
	if err != nil {
		return nil, err
	}
	var oldID string
	for _, cn := range cns {
		if cn.node == old {
			oldID = cn.id
		}
	}
	var replica *node
	for _, cn := range cns {
		if cn.masterID == oldID && cn.node != nil && cn.node.running() && !cn.fail {
			replica = cn.node
		}
	}
	if replica == nil {
		return nil, fmt.Errorf("%s has no running replica", old.name)
	}
	return func() error {
		if err := replica.cl.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
			return fmt.Errorf("CLUSTER FAILOVER on %s: %w", replica.name, err)
		}
		return nil
	}, nil
}

// promoted reports whether old is no longer a master.
func (c *chaos) promoted(old *node) bool {
	info, err := old.cl.Info(context.Background(), "replication").Result()
	return err == nil && !strings.Contains(info, "role:master")
}

// slotKeys are the hash-tagged keys whose slots a migration moves: an app under quota, the app
// over its quota, and the cluster's own keys.
var slotKeys = []string{"{default/a1}", "{default/hot}", "{default}"}

// migrate moves the slot of one of slotKeys to another master the way redis-cli --cluster
// reshard does, pausing param ms between marking the slot and moving its keys (clients get ASK
// meanwhile), then waits (at least the hold) until the cluster is healthy.
func (c *chaos) migrate(f fault) error {
	ctx := context.Background()
	key := slotKeys[f.target%len(slotKeys)]
	from, slot, err := c.top.masterOf(key)
	if err != nil {
		return err
	}
	cns, err := c.top.clusterNodes()
	if err != nil {
		return err
	}
	ids := map[*node]string{}
	var to *node
	var masters []*node
	for _, cn := range cns {
		if cn.node == nil {
			continue
		}
		ids[cn.node] = cn.id
		if cn.master && !cn.fail && cn.node.running() {
			masters = append(masters, cn.node)
			if cn.node != from && to == nil {
				to = cn.node
			}
		}
	}
	if to == nil {
		return errors.New("no other master to migrate to")
	}
	s := strconv.Itoa(slot)
	began := time.Now()
	if err := to.cl.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", ids[from]).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING: %w", err)
	}
	if err := from.cl.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", ids[to]).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING: %w", err)
	}
	time.Sleep(time.Duration(f.param) * time.Millisecond)
	for {
		keys, err := from.cl.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", strconv.Itoa(to.port), "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := from.cl.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("MIGRATE: %w", err)
		}
	}
	for _, n := range append([]*node{to, from}, masters...) {
		if err := n.cl.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", ids[to]).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", n.name, err)
		}
	}
	if rest := f.hold - time.Since(began); rest > 0 {
		time.Sleep(rest)
	}
	return c.top.waitHealthy(30 * time.Second)
}
