package admin

import (
	"net/url"
	"slices"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// connectionsPage is GET /rate_limit/connections: the cluster's total, then one page of apps in
// the order and with the filter of GET /rate_limit/apps (?limit, ?cursor, ?q, ?sort; sort
// in_flight puts the busiest first with "-"). The apps are the configured ones, "*" (while
// unknown apps are admitted or have been in flight) and every other id the counter knows: an
// isolated tenant, or an app a reload removed while its requests were in flight.
func connectionsPage(c Cluster, params url.Values) (any, error) {
	lq, err := parseList(params)
	if err != nil {
		return nil, err
	}
	lim, counter := c.Limiter(), c.Connections()
	cfg := lim.Config()
	byApp := map[string]connlimit.Stats{}
	v := ConnectionsView{Cluster: c.ID(), Apps: []ConnectionView{}, Sort: lq.sorted}
	for _, s := range counter.Snapshot() {
		if s.App == "" {
			v.Total = connectionView(s)
		} else {
			byApp[s.App] = s
		}
	}
	others := isolatedIDs(lim)
	listed := make(map[string]bool, len(others))
	for _, id := range others {
		listed[id] = true
	}
	for id := range byApp {
		if _, configured := cfg.Apps[id]; !configured && id != wildcardApp && !listed[id] {
			others = append(others, id)
		}
	}
	slices.Sort(others)
	entries, less := ordered(c, lq, others)
	if _, seen := byApp[wildcardApp]; !seen && cfg.UnknownApp == limiter.UnknownReject {
		entries = slices.DeleteFunc(entries, func(e entry) bool { return e.id == wildcardApp })
	}
	pg := paginate(entries, less)(lq)
	v.AppCount, v.NextCursor = pg.total, pg.next
	for _, e := range pg.entries {
		s := byApp[e.id]
		s.App = e.id
		// the policy in force (the counter keeps the last one a request applied)
		if p, configured := cfg.Apps[e.id]; configured {
			s.Limit = maxConnections(e.id, p, counter)
		} else if e.id == wildcardApp {
			s.Limit = maxConnections(e.id, cfg.Default, counter)
		}
		v.Apps = append(v.Apps, connectionView(s))
	}
	return v, nil
}
