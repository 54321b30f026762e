package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/console"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// prefix is the subtree of the admin endpoint that this module serves.
const prefix = "/rate_limit/"

// wildcardApp is the app under which every unknown app is shown (as in the metrics).
const wildcardApp = "*"

// Routes returns the one route of the module: the /rate_limit/ subtree, dispatched by serve.
//
//	GET  /rate_limit/                        ClusterView
//	GET  /rate_limit/apps                    AppsView
//	GET  /rate_limit/apps/<id>               AppView
//	PUT|DELETE /rate_limit/apps/<id>         an app's override (overrides.go) → AppView
//	GET|PUT|DELETE /rate_limit/clusters/<id> the cluster's L1 policy and override → ClusterPolicyView
//	GET  /rate_limit/connections             ConnectionsView
//	GET  /rate_limit/emergency               EmergencyView
//	POST /rate_limit/emergency/activate      {"reason": "…", "duration": "5m"} → EmergencyView
//	POST /rate_limit/emergency/deactivate    (no body, or {}) → EmergencyView
//	GET  /rate_limit/history?seconds=N       HistoryView
//	GET  /rate_limit/stream                  text/event-stream of StreamEvent
//	GET  /rate_limit/ui/                     the web console (ui.go)
//
// Every route takes ?cluster=<id>, which may be omitted when this process runs exactly one
// cluster.
func (a API) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: prefix, Handler: caddy.AdminHandlerFunc(a.serve)}}
}

// view builds one route's response from the selected cluster.
type view func(c Cluster) (any, error)

// action is a route that changes the selected cluster's state and returns the response.
type action func(w http.ResponseWriter, r *http.Request, c Cluster) (any, error)

// route is what one path takes, by method.
type route struct {
	get             view
	post, put, del  action
	clusterFromPath string // clusters/<id>: the cluster is the path's, not ?cluster's
	badPath         error  // the path names something that cannot exist (an invalid app id): 400
}

// allow lists the route's methods (the Allow header of a 405).
func (rt route) allow() []string {
	var m []string
	for _, x := range []struct {
		ok   bool
		name string
	}{{rt.get != nil, http.MethodGet}, {rt.post != nil, http.MethodPost}, {rt.put != nil, http.MethodPut},
		{rt.del != nil, http.MethodDelete}} {
		if x.ok {
			m = append(m, x.name)
		}
	}
	return m
}

// match returns the route of a path below /rate_limit/ (ok false: none).
func (a API) match(w http.ResponseWriter, r *http.Request, rest string) (rt route, ok bool) {
	switch {
	case rest == "":
		rt.get = func(c Cluster) (any, error) { return clusterView(c), nil }
	case rest == "apps" || rest == "apps/":
		rt.get = func(c Cluster) (any, error) { return AppsView{Cluster: c.ID(), Apps: appViews(c)}, nil }
	case strings.HasPrefix(rest, "apps/") && !strings.Contains(rest[len("apps/"):], "/"):
		id := strings.TrimPrefix(rest, "apps/")
		if id != wildcardApp && !limiter.ValidAppID(id) {
			rt.badPath = invalidAppID(id)
		}
		rt.get = func(c Cluster) (any, error) { return appView(c, id) }
		rt.put, rt.del = a.putApp(id), a.deleteApp(id)
	case strings.HasPrefix(rest, "clusters/") && rest != "clusters/" && !strings.Contains(rest[len("clusters/"):], "/"):
		rt.clusterFromPath = strings.TrimPrefix(rest, "clusters/")
		rt.get = func(c Cluster) (any, error) { return clusterPolicyView(c), nil }
		rt.put, rt.del = a.putCluster, a.deleteCluster
	case rest == "connections":
		rt.get = func(c Cluster) (any, error) { return connectionsView(c), nil }
	case rest == "emergency":
		rt.get = func(c Cluster) (any, error) { return emergencyView(c.Limiter().State()), nil }
	case rest == "emergency/activate":
		rt.post = a.activate
	case rest == "emergency/deactivate":
		rt.post = a.deactivate
	case rest == "history":
		rt.get = func(c Cluster) (any, error) { return historyView(c, r.URL.Query()) }
	case rest == "stream":
		rt.get = func(c Cluster) (any, error) { return a.stream(w, r, c) }
	default:
		return rt, false
	}
	return rt, true
}

// invalidAppID is the 400 of a path naming an app id that cannot exist.
func invalidAppID(id string) error {
	return apiError(http.StatusBadRequest, "invalid app id %q: an app id is 1-128 characters of [A-Za-z0-9._:-]", id)
}

// serve dispatches a request below /rate_limit/: unknown path 404, a method the route does not
// take 405 (with Allow), then the cluster selection (400/404), then the route itself.
func (a API) serve(w http.ResponseWriter, r *http.Request) error {
	rest, _ := strings.CutPrefix(r.URL.Path, prefix) // the route's pattern: always there
	if isUI(rest) {                                  // the web console: static files, no cluster
		return serveUI(w, r, rest, console.Files())
	}
	if id, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix+"apps/"); ok && strings.Contains(strings.ToLower(id), "%2f") {
		// An escaped slash in an app id: one segment, whatever the decoded path shows.
		p, _ := url.PathUnescape(id)
		return invalidAppID(p)
	}
	rt, ok := a.match(w, r, rest)
	if !ok {
		return apiError(http.StatusNotFound, "no rate_limit admin route %s (see %sapps, %sclusters/<id>, %sconnections, %semergency, %shistory, %sstream, %sui/)",
			r.URL.Path, prefix, prefix, prefix, prefix, prefix, prefix, prefix)
	}
	var act action
	switch r.Method {
	case http.MethodGet:
		if rt.get != nil {
			get := rt.get
			act = func(_ http.ResponseWriter, _ *http.Request, c Cluster) (any, error) { return get(c) }
		}
	case http.MethodPost:
		act = rt.post
	case http.MethodPut:
		act = rt.put
	case http.MethodDelete:
		act = rt.del
	}
	if act == nil {
		allow := rt.allow()
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return apiError(http.StatusMethodNotAllowed, "method %s not allowed on %s (allowed: %s)",
			r.Method, r.URL.Path, strings.Join(allow, ", "))
	}
	if rt.badPath != nil {
		return rt.badPath
	}
	var id string
	switch ids := r.URL.Query()["cluster"]; len(ids) {
	case 0:
	case 1:
		id = ids[0]
	default:
		return apiError(http.StatusBadRequest, "?cluster given %d times: name one cluster", len(ids))
	}
	if rt.clusterFromPath != "" {
		if id != "" && id != rt.clusterFromPath {
			return apiError(http.StatusBadRequest, "?cluster=%q contradicts the path's cluster %q", id, rt.clusterFromPath)
		}
		id = rt.clusterFromPath
	}
	c, err := a.selectCluster(id)
	if err != nil {
		return err
	}
	body, err := act(w, r, c)
	var fe fieldsError
	if errors.As(err, &fe) {
		return writeJSONStatus(w, http.StatusBadRequest, map[string]any{"error": fe.msg, "fields": fe.fields})
	}
	if err != nil {
		return err
	}
	if _, ok := body.(written); ok {
		return nil
	}
	return writeJSON(w, body)
}

func apiError(status int, format string, args ...any) error {
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf(format, args...)}
}

// writeJSON encodes v completely before writing anything, so that an encoding error can still
// be answered with a status.
func writeJSON(w http.ResponseWriter, v any) error {
	return writeJSONStatus(w, http.StatusOK, v)
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// clusters lists the live clusters, one per id, sorted by id. While a reload moves a cluster id
// to another Store, both states are live for a moment: the first by Store name is shown.
func (a API) clusters() []Cluster {
	list := a.source
	if list == nil {
		list = liveClusters
	}
	var all []Cluster
	for _, c := range list() {
		if c != nil && c.Limiter() != nil && c.Connections() != nil {
			all = append(all, c)
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].ID() != all[j].ID() {
			return all[i].ID() < all[j].ID()
		}
		return all[i].Store() < all[j].Store()
	})
	out := all[:0]
	for _, c := range all {
		if len(out) == 0 || out[len(out)-1].ID() != c.ID() {
			out = append(out, c)
		}
	}
	return out
}

// selectCluster returns the cluster named by ?cluster=id; id "" selects the only cluster.
func (a API) selectCluster(id string) (Cluster, error) {
	all := a.clusters()
	ids := make([]string, len(all))
	for i, c := range all {
		ids[i] = strconv.Quote(c.ID())
	}
	if id == "" {
		switch len(all) {
		case 0:
			return nil, apiError(http.StatusNotFound, "no rate_limit cluster is running in this process")
		case 1:
			return all[0], nil
		}
		return nil, apiError(http.StatusBadRequest, "this process runs %d rate_limit clusters: choose one with ?cluster=<id> (%s)",
			len(all), strings.Join(ids, ", "))
	}
	for _, c := range all {
		if c.ID() == id {
			return c, nil
		}
	}
	if len(all) == 0 {
		return nil, apiError(http.StatusNotFound, "unknown cluster %q: no rate_limit cluster is running in this process", id)
	}
	return nil, apiError(http.StatusNotFound, "unknown cluster %q (this process runs %s)", id, strings.Join(ids, ", "))
}

// num makes a float encodable: JSON has no NaN or infinities.
func num(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// clusterView is GET /rate_limit/.
func clusterView(c Cluster) ClusterView {
	lim := c.Limiter()
	cfg := lim.Config()
	st := lim.State()
	level := lim.Level()
	v := ClusterView{
		Cluster:       c.ID(),
		Instance:      cfg.Instance,
		Store:         c.Store(),
		Capacity:      num(cfg.Cluster.Capacity),
		UnknownApp:    cfg.UnknownApp.String(),
		Degradation:   LevelView{Name: level.String(), Number: int(level)},
		Usage:         num(st.Usage),
		Factors:       make([]float64, len(st.Factors)),
		Emergency:     emergencyView(st),
		LiveInstances: st.LiveInstances,
		StoreLatency:  lim.Latency().Seconds(),
	}
	for i, f := range st.Factors {
		v.Factors[i] = num(f)
	}
	var admitted, hits int64
	for _, s := range lim.Stats() {
		admitted += s.Requests[store.ReasonNone]
		hits += s.LocalHits
		v.Leases += s.Leases
		v.LeaseTokens += s.LeaseTokens
	}
	if admitted > 0 {
		v.LocalHitRatio = min(float64(hits)/float64(admitted), 1)
	}
	return v
}

// emergencyView is L1's emergency state from the last successful report: the operator's
// (source "operator", POST /rate_limit/emergency/activate) or L1's own usage threshold
// ("auto"; also for a Store that does not name the source).
func emergencyView(st store.ClusterState) EmergencyView {
	e := EmergencyView{Active: st.Emergency, Reason: st.EmergencyReason}
	if st.Emergency {
		e.Source = st.EmergencySource
		if e.Source == "" {
			e.Source = store.EmergencySourceAuto
		}
	}
	if !st.EmergencyUntil.IsZero() {
		u := st.EmergencyUntil.UTC()
		e.Until = &u
	}
	return e
}

// appViews is every configured app, sorted by id, then "*".
func appViews(c Cluster) []AppView {
	lim, counter := c.Limiter(), c.Connections()
	cfg := lim.Config()
	stats := statsByLabel(c)
	conns := connsByApp(counter)
	ids := appIDs(cfg)
	out := make([]AppView, 0, len(ids)+1)
	for _, id := range ids {
		p := cfg.Apps[id]
		v := newAppView(id, &p, stats[id], conns[id], counter)
		v.Source = lim.AppSource(id)
		if o, ok, why := lim.StoredAppOverride(id); ok && why != nil {
			v.OverrideNotApplied = &NotAppliedView{Override: overrideFields(&o), Reason: why.Error()}
		} else if ok {
			v.Override = overrideFields(&o)
		}
		out = append(out, v)
	}
	return append(out, newAppView(wildcardApp, starPolicy(cfg), stats[wildcardApp], conns[wildcardApp], counter))
}

// appIDs is the configured apps' ids, sorted.
func appIDs(cfg limiter.Config) []string {
	ids := make([]string, 0, len(cfg.Apps))
	for id := range cfg.Apps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// starPolicy is the policy of unknown apps ("*"): nil when they are rejected (no bucket).
func starPolicy(cfg limiter.Config) *store.AppPolicy {
	if cfg.UnknownApp == limiter.UnknownReject {
		return nil
	}
	return &cfg.Default
}

// appView is GET /rate_limit/apps/<id>: a configured app or "*".
func appView(c Cluster, id string) (AppView, error) {
	for _, v := range appViews(c) {
		if v.ID == id {
			return v, nil
		}
	}
	if _, ok, why := c.Limiter().StoredAppOverride(id); ok && why != nil {
		return AppView{}, apiError(http.StatusNotFound, "app %q of cluster %q exists through an admin override "+
			"that this instance leaves out (%v): change it, or remove it with DELETE", id, c.ID(), why)
	}
	return AppView{}, apiError(http.StatusNotFound, "unknown app %q in cluster %q (unknown apps are shown as %q)",
		id, c.ID(), wildcardApp)
}

// statsByLabel is the limiter's statistics by label, with the decisions the root takes before
// there is an app (invalid id, unknown app rejected) added to "*".
func statsByLabel(c Cluster) map[string]limiter.AppStats {
	m := map[string]limiter.AppStats{}
	for _, s := range c.Limiter().Stats() {
		m[s.Label] = s
	}
	if pc, ok := c.(PreAppCounter); ok {
		invalid, unknown := pc.PreAppRejections()
		s := m[wildcardApp]
		s.Label = wildcardApp
		s.Requests[store.ReasonInvalidAppID] += invalid
		s.Requests[store.ReasonUnknownApp] += unknown
		m[wildcardApp] = s
	}
	return m
}

// connsByApp is the counter's per-app figures by app id.
func connsByApp(counter *connlimit.Counter) map[string]connlimit.Stats {
	m := map[string]connlimit.Stats{}
	for _, s := range counter.Snapshot() {
		if s.App != "" {
			m[s.App] = s
		}
	}
	return m
}

// maxConnections is an app's effective in-flight limit: its own, or connections.app.
func maxConnections(id string, p store.AppPolicy, counter *connlimit.Counter) int64 {
	if p.MaxConnections > 0 {
		return p.MaxConnections
	}
	limit, _ := counter.Limits(id, 0)
	return limit
}

func newAppView(id string, p *store.AppPolicy, s limiter.AppStats, cs connlimit.Stats, counter *connlimit.Counter) AppView {
	v := AppView{
		ID:                  id,
		Source:              limiter.SourceConfig,
		LocalTokens:         s.LocalTokens,
		LocalDebt:           s.LocalDebt,
		Requests:            RequestsView{Allowed: s.Requests[store.ReasonNone], Reasons: map[string]int64{}},
		Cost:                s.Cost,
		LocalHits:           s.LocalHits,
		Leases:              s.Leases,
		LeaseTokens:         s.LeaseTokens,
		Borrowed:            num(s.Borrowed),
		Debt:                num(s.Debt),
		InFlight:            cs.Current,
		Peak:                cs.Peak,
		ConnectionsRejected: cs.Rejected,
		Leaked:              cs.Leaked,
	}
	for r, n := range s.Requests {
		if reason := store.Reason(r); reason != store.ReasonNone && n != 0 {
			v.Requests.Rejected += n
			v.Requests.Reasons[reason.String()] = n
		}
	}
	if p != nil {
		v.Policy = &PolicyView{
			Guaranteed:     num(p.Guaranteed),
			Burst:          num(p.Burst),
			Priority:       p.Priority,
			MaxBorrow:      num(p.MaxBorrow),
			MaxConnections: maxConnections(id, *p, counter),
			Warmup:         p.Warmup.String(),
		}
	}
	return v
}

// connectionsView is GET /rate_limit/connections: the cluster's total, then every configured
// app, "*", and any other app the counter still holds (one removed by a reload, say).
func connectionsView(c Cluster) ConnectionsView {
	lim, counter := c.Limiter(), c.Connections()
	cfg := lim.Config()
	snap := counter.Snapshot()
	v := ConnectionsView{Cluster: c.ID(), Apps: []ConnectionView{}}
	byApp := map[string]connlimit.Stats{}
	for _, s := range snap {
		if s.App == "" {
			v.Total = connectionView(s)
		} else {
			byApp[s.App] = s
		}
	}
	ids := make([]string, 0, len(cfg.Apps))
	for id := range cfg.Apps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	add := func(id string, limit int64) {
		s := byApp[id]
		delete(byApp, id)
		s.App = id
		s.Limit = limit // the policy in force (the counter keeps the last one a request applied)
		v.Apps = append(v.Apps, connectionView(s))
	}
	for _, id := range ids {
		add(id, maxConnections(id, cfg.Apps[id], counter))
	}
	if _, seen := byApp[wildcardApp]; seen || cfg.UnknownApp != limiter.UnknownReject {
		add(wildcardApp, maxConnections(wildcardApp, cfg.Default, counter))
	}
	rest := make([]string, 0, len(byApp))
	for id := range byApp {
		rest = append(rest, id)
	}
	sort.Strings(rest)
	for _, id := range rest {
		v.Apps = append(v.Apps, connectionView(byApp[id]))
	}
	return v
}

func connectionView(s connlimit.Stats) ConnectionView {
	return ConnectionView{App: s.App, Current: s.Current, Peak: s.Peak, Limit: s.Limit,
		Remote: s.Remote, Held: s.Held, Rejected: s.Rejected, Leaked: s.Leaked}
}
