package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The faults of the schedule.
const (
	gwKill     = "gateway-sigkill"   // SIGKILL a gateway, start it again after the hold
	gwTerm     = "gateway-sigterm"   // SIGTERM (graceful stop), start it again after the hold
	gwReload   = "gateway-reload"    // caddy reload (a policy change, or --force) on one gateway, 1–3 times
	masterKill = "redis-master-kill" // SIGKILL a master; a replica takes over; the old master comes back as a replica
	failover   = "redis-failover"    // CLUSTER FAILOVER on a replica / SENTINEL FAILOVER
	latency    = "redis-latency"     // every proxy adds latency (20 ms or 150 ms) for the hold
	resets     = "redis-resets"      // every proxied connection reset every 300 ms for the hold
	partition  = "partition"         // one gateway cut from every Redis node for the hold
	migrate    = "slot-migration"    // an app's or the cluster's slot moved to another master (cluster only)
)

// topologyFaults change which Redis node serves what; two of them at once could leave a shard
// without a master, which no client can survive, so an episode has at most one.
var topologyFaults = []string{masterKill, failover, migrate}

// storeFaults may put a gateway in fail_open (its rescue limits then apply).
var storeFaults = []string{masterKill, failover, resets, partition, migrate, latency}

// fault is one fault of an episode, drawn from the seed.
type fault struct {
	kind   string
	target int           // a gateway (gateway faults, partition) or a master / key choice (Redis faults)
	hold   time.Duration // how long the fault lasts before it is healed
	param  int           // latency in ms; reload count; migration pause in ms
}

func (f fault) String() string {
	s := fmt.Sprintf("%s[target %d, hold %v", f.kind, f.target, f.hold)
	switch f.kind {
	case latency:
		s += fmt.Sprintf(", +%d ms", f.param)
	case gwReload:
		s += fmt.Sprintf(", %d reloads", f.param)
	case migrate:
		s += fmt.Sprintf(", pause %d ms", f.param)
	}
	return s + "]"
}

// episode is a quiet gap followed by one or two faults at once.
type episode struct {
	gap    time.Duration
	faults []fault
}

func (e episode) String() string {
	fs := make([]string, 0, len(e.faults))
	for _, f := range e.faults {
		fs = append(fs, f.String())
	}
	return fmt.Sprintf("after %v: %s", e.gap, strings.Join(fs, " + "))
}

// schedule draws n episodes from the seed. Gateway 0 is never stopped (its goroutine and heap
// series span the whole run); gateways 1..gws-1 are. An episode has two faults at once with
// probability 1/2, never two topology faults, never the same kind twice.
func schedule(seed uint64, mode string, gws, n int, short bool) []episode {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) //nolint:gosec // G404: seeded for a reproducible schedule, not a secret
	kinds := []string{gwKill, gwTerm, gwReload, masterKill, failover, latency, resets, partition}
	if mode == "cluster" {
		kinds = append(kinds, migrate)
	}
	maxHold, maxGap := 6, 8
	if short {
		maxHold, maxGap = 4, 4
	}
	out := make([]episode, 0, n)
	for range n {
		e := episode{gap: time.Duration(2+rng.IntN(maxGap-1)) * time.Second}
		count := 1 + rng.IntN(2)
		for len(e.faults) < count {
			k := kinds[rng.IntN(len(kinds))]
			if !compatible(e.faults, k) {
				continue
			}
			f := fault{kind: k, hold: time.Duration(1000+rng.IntN(maxHold*1000-1000)) * time.Millisecond}
			switch k {
			case gwKill, gwTerm:
				f.target = 1 + rng.IntN(gws-1)
			case partition, gwReload:
				f.target = rng.IntN(gws)
			default:
				f.target = rng.IntN(3)
			}
			switch k {
			case latency:
				f.param = []int{20, 150}[rng.IntN(2)]
			case gwReload:
				f.param = 1 + rng.IntN(3)
			case migrate:
				f.param = rng.IntN(1500)
			}
			if clashes(e.faults, f) {
				continue
			}
			e.faults = append(e.faults, f)
		}
		out = append(out, e)
	}
	return out
}

func compatible(fs []fault, k string) bool {
	for _, f := range fs {
		if f.kind == k || (slices.Contains(topologyFaults, f.kind) && slices.Contains(topologyFaults, k)) {
			return false
		}
	}
	return true
}

// clashes reports whether f cannot run beside a fault of fs on the same gateway: a stop
// (SIGKILL, SIGTERM) beside another stop, a partition or a reload of that gateway (a reload needs
// it running), and two partitions. A reload beside a partition runs.
func clashes(fs []fault, f fault) bool {
	onGateway := func(k string) bool { return k == gwKill || k == gwTerm || k == partition || k == gwReload }
	stops := func(k string) bool { return k == gwKill || k == gwTerm }
	for _, g := range fs {
		if !onGateway(f.kind) || !onGateway(g.kind) || g.target != f.target {
			continue
		}
		if stops(f.kind) || stops(g.kind) || f.kind == g.kind {
			return true
		}
	}
	return false
}
