package tierbucket

import (
	"github.com/tierbucket/caddy-tierbucket/admin"
	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// The admin API (package admin, module admin.api.rate_limit) reads the live cluster states
// through this adapter; importing package admin here also puts its module in every build.
func init() {
	admin.SetSource(adminClusters)
}

// adminClusters lists every live cluster state for the admin API.
func adminClusters() []admin.Cluster {
	live := liveClusters()
	out := make([]admin.Cluster, len(live))
	for i, s := range live {
		out[i] = adminCluster{s}
	}
	return out
}

// adminCluster is a clusterState as package admin sees it.
type adminCluster struct{ s *clusterState }

func (c adminCluster) ID() string                      { return c.s.key.cluster }
func (c adminCluster) Limiter() *limiter.Limiter       { return c.s.lim }
func (c adminCluster) Connections() *connlimit.Counter { return c.s.conns }
func (c adminCluster) History() *history.Recorder      { return c.s.hist.rec }

// Store is "memory" or "redis" (the Redis identity, addresses included, is not shown).
func (c adminCluster) Store() string {
	if c.s.key.store == "memory" {
		return "memory"
	}
	return "redis"
}

// PreAppRejections are the decisions taken before there is an app (shown under "*").
func (c adminCluster) PreAppRejections() (invalidAppID, unknownApp int64) {
	return c.s.invalidIDs.Load(), c.s.unknownRejects.Load()
}

var (
	_ admin.Cluster       = adminCluster{}
	_ admin.PreAppCounter = adminCluster{}
)
