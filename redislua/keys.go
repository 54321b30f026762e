package redislua

import "strings"

// DefaultPrefix is the key prefix when none is configured.
const DefaultPrefix = "ratelimit"

// keys builds the key schema (docs/admin-api.md and docs/design.md). The hash tags put a cluster's keys in one slot and
// each app's keys in another, so that every script touches one slot and apps spread over the
// shards of a Redis Cluster.
type keys struct{ prefix string }

// clusterTag is "{<cluster>}".
func (k keys) clusterTag(cluster string) string { return "{" + escapeTag(cluster) + "}" }

// appTag is "{<cluster>/<app>}".
func (k keys) appTag(cluster, app string) string {
	return "{" + escapeTag(cluster) + "/" + escapeTag(app) + "}"
}

func (k keys) l1(cluster string) string    { return k.prefix + ":" + k.clusterTag(cluster) + ":l1" }
func (k keys) nodes(cluster string) string { return k.prefix + ":" + k.clusterTag(cluster) + ":nodes" }

func (k keys) clusterConn(cluster string) string {
	return k.prefix + ":" + k.clusterTag(cluster) + ":conn"
}
func (k keys) cfg(cluster string) string { return k.prefix + ":" + k.clusterTag(cluster) + ":cfg" }
func (k keys) audit(cluster string) string {
	return k.prefix + ":" + k.clusterTag(cluster) + ":audit"
}

func (k keys) events(cluster string) string {
	return k.prefix + ":" + k.clusterTag(cluster) + ":events"
}

// slots is the hash of one scope's connection slot holdings ("" = the cluster's); in the
// cluster's slot, beside the nodes set.
func (k keys) slots(cluster, app string) string {
	if app == "" {
		return k.prefix + ":" + k.clusterTag(cluster) + ":slots"
	}
	return k.prefix + ":" + k.clusterTag(cluster) + ":slots:" + app
}

func (k keys) l2(cluster, app string) string { return k.prefix + ":" + k.appTag(cluster, app) + ":l2" }

func (k keys) appConn(cluster, app string) string {
	return k.prefix + ":" + k.appTag(cluster, app) + ":conn"
}

// escapeTag keeps braces out of a hash tag (a "}" in an id would end the tag early and scatter
// an app's keys over several slots). App ids cannot contain them; cluster ids might.
func escapeTag(s string) string {
	if !strings.ContainsAny(s, "{}%") {
		return s
	}
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(s)
}
