package cluster

import (
	"slices"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// logPolicyChange logs, once, what a reload changed in a live cluster's policy: the apps it
// added, removed and changed, and whether the cluster's L1 policy or the connection limits
// changed. A reload that changes none of it (other sites, other handlers) logs nothing.
func logPolicyChange(log *zap.Logger, old, cur limiter.Config, oldConns, curConns connlimit.Config) {
	if log == nil {
		return
	}
	var added, removed, changed []string
	for id, p := range cur.Apps {
		if q, ok := old.Apps[id]; !ok {
			added = append(added, id)
		} else if p != q {
			changed = append(changed, id)
		}
	}
	for id := range old.Apps {
		if _, ok := cur.Apps[id]; !ok {
			removed = append(removed, id)
		}
	}
	clusterChanged := old.Cluster != cur.Cluster
	connsChanged := oldConns != curConns
	if len(added)+len(removed)+len(changed) == 0 && !clusterChanged && !connsChanged {
		return
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(changed)
	log.Info("rate_limit: a reload changed the cluster's policy",
		zap.String("cluster", cur.Cluster.ID),
		zap.Strings("apps_added", added), zap.Strings("apps_removed", removed), zap.Strings("apps_changed", changed),
		zap.Bool("cluster_policy_changed", clusterChanged), zap.Bool("connections_changed", connsChanged))
}
