package admin

import (
	"context"
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
	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// prefix is the subtree of the admin endpoint that this module serves.
const prefix = "/rate_limit/"

// wildcardApp is the app under which every unknown app is shown (as in the metrics).
const wildcardApp = "*"

// Routes returns the one route of the module: the /rate_limit/ subtree, which serve hands to a
// ServeMux holding the routes below.
//
//	GET  /rate_limit/                        ClusterView
//	GET  /rate_limit/apps                    AppsView, a page (apps.go)
//	GET  /rate_limit/apps/<id>               AppView
//	PUT|DELETE /rate_limit/apps/<id>         an app's override (overrides.go) → AppView
//	GET|PUT|DELETE /rate_limit/clusters/<id> the cluster's L1 policy and override → ClusterPolicyView
//	GET  /rate_limit/connections             ConnectionsView, a page (connections.go)
//	GET  /rate_limit/emergency               EmergencyView
//	POST /rate_limit/emergency/activate      {"reason": "…", "duration": "5m"} → EmergencyView
//	POST /rate_limit/emergency/deactivate    (no body, or {}) → EmergencyView
//	GET  /rate_limit/history?seconds=N       HistoryView
//	GET  /rate_limit/history?range=R         RangeView
//	GET  /rate_limit/audit?limit=N           AuditView
//	GET  /rate_limit/stream                  text/event-stream of StreamEvent
//	GET  /rate_limit/ui/                     the web console (ui.go)
//
// Every route takes ?cluster=<id>, which may be omitted when this process runs exactly one
// cluster.
func (a API) Routes() []caddy.AdminRoute {
	mux := a.mux()
	return []caddy.AdminRoute{{Pattern: prefix, Handler: caddy.AdminHandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return serve(mux, w, r)
	})}}
}

// mux is the ServeMux of the routes below.
func (a API) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(prefix, muxHandler(noRoute)) // the paths no route below has
	for _, rt := range a.routes() {
		a.register(mux, rt)
	}
	return mux
}

// action is one method of one route: it runs on the cluster the request selects and returns
// the response (written: it wrote the response itself).
type action func(w http.ResponseWriter, r *http.Request, c Cluster) (any, error)

// route is one path below /rate_limit/ and the action of each method it takes.
type route struct {
	path                string // a ServeMux path pattern, below /rate_limit/
	get, post, put, del action
	pathCluster         bool                        // clusters/{id}: the cluster is the path's {id}, not ?cluster's
	validate            func(r *http.Request) error // a 400 for a path naming something that cannot exist
}

// routes is the API's routes.
func (a API) routes() []route {
	apps := func(_ http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
		return appsPage(c, r.URL.Query())
	}
	return []route{
		{path: "{$}", get: show(func(c Cluster) ClusterView {
			v := clusterView(c)
			v.ReadOnly = a.readOnly
			return v
		})},
		{path: "apps", get: apps},
		{path: "apps/{$}", get: apps},
		{
			path: "apps/{id}", validate: validAppPath,
			get: func(_ http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
				return appView(c, r.PathValue("id"))
			},
			put: ofPathID(a.putApp), del: ofPathID(a.deleteApp),
		},
		{path: "clusters/{id}", pathCluster: true, get: show(clusterPolicyView), put: a.putCluster, del: a.deleteCluster},
		{path: "connections", get: func(_ http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
			return connectionsPage(c, r.URL.Query())
		}},
		{path: "emergency", get: show(func(c Cluster) EmergencyView { return emergencyView(c.Limiter().State()) })},
		{path: "emergency/activate", post: a.activate},
		{path: "emergency/deactivate", post: a.deactivate},
		{path: "history", get: func(_ http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
			if q := r.URL.Query(); q.Has("range") {
				return rangeView(r, c, q)
			}
			return historyView(c, r.URL.Query())
		}},
		{path: "stream", get: a.stream},
		{path: "audit", get: func(_ http.ResponseWriter, r *http.Request, c Cluster) (any, error) { return auditView(r, c) }},
	}
}

// show is the GET action answering view(c).
func show[V any](view func(Cluster) V) action {
	return func(_ http.ResponseWriter, _ *http.Request, c Cluster) (any, error) { return view(c), nil }
}

// ofPathID is the action that f gives for the path's {id}.
func ofPathID(f func(id string) action) action {
	return func(w http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
		return f(r.PathValue("id"))(w, r, c)
	}
}

// register puts rt on mux: a pattern for each method it takes, and for every other method a
// 405 whose Allow lists them in the order GET, POST, PUT, DELETE. HEAD is one of the others:
// the routes answer JSON and take no HEAD, while ServeMux would serve HEAD with the GET
// pattern. ServeMux's own 405 is never reached (every path has a pattern without a method):
// its Allow is sorted by name and adds HEAD to GET, and its body is text/plain.
func (a API) register(mux *http.ServeMux, rt route) {
	pattern := prefix + rt.path
	var allow []string
	for _, m := range []struct {
		method string
		act    action
	}{{http.MethodGet, rt.get}, {http.MethodPost, rt.post}, {http.MethodPut, rt.put}, {http.MethodDelete, rt.del}} {
		if m.act != nil {
			allow = append(allow, m.method)
			mux.Handle(m.method+" "+pattern, muxHandler(a.run(rt, m.act)))
		}
	}
	refuse := muxHandler(func(w http.ResponseWriter, r *http.Request) error {
		list := strings.Join(allow, ", ")
		w.Header().Set("Allow", list)
		return apiError(http.StatusMethodNotAllowed, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, list)
	})
	mux.Handle(pattern, refuse)
	if rt.get != nil {
		mux.Handle(http.MethodHead+" "+pattern, refuse)
	}
}

// run answers a method rt takes: the path's validation (400), then the cluster selection
// (400/404), then act on the cluster.
func (a API) run(rt route, act action) caddy.AdminHandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if a.readOnly && r.Method != http.MethodGet {
			return readOnlyError(r)
		}
		if rt.validate != nil {
			if err := rt.validate(r); err != nil {
				return err
			}
		}
		var id string
		switch ids := r.URL.Query()["cluster"]; len(ids) {
		case 0:
		case 1:
			id = ids[0]
		default:
			return apiError(http.StatusBadRequest, "?cluster given %d times: name one cluster", len(ids))
		}
		if rt.pathCluster {
			fromPath := r.PathValue("id")
			if id != "" && id != fromPath {
				return apiError(http.StatusBadRequest, "?cluster=%q contradicts the path's cluster %q", id, fromPath)
			}
			id = fromPath
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
}

// validAppPath is the 400 of apps/{id} naming an id that cannot exist ("*" is every unknown app).
func validAppPath(r *http.Request) error {
	if id := r.PathValue("id"); id != wildcardApp && !limiter.ValidAppID(id) {
		return invalidAppID(id)
	}
	return nil
}

// invalidAppID is the 400 of a path naming an app id that cannot exist.
func invalidAppID(id string) error {
	return apiError(http.StatusBadRequest, "invalid app id %q: an app id is 1-128 characters of [A-Za-z0-9._:-]", id)
}

// noRoute is the 404 of a path below /rate_limit/ that no route has, whatever the method.
func noRoute(_ http.ResponseWriter, r *http.Request) error {
	return apiError(http.StatusNotFound, "no rate_limit admin route %s (see %sapps, %sclusters/<id>, %sconnections, %semergency, %shistory, %sstream, %saudit, %sui/)",
		r.URL.Path, prefix, prefix, prefix, prefix, prefix, prefix, prefix, prefix)
}

// serve answers a request below /rate_limit/: the console (ui.go) and an escaped slash in an
// app id first, then the route mux finds for the decoded path (see routed).
func serve(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) error {
	rest, _ := strings.CutPrefix(r.URL.Path, prefix) // the route's pattern: always there
	if isUI(rest) {                                  // the web console: static files, no cluster
		return serveUI(w, r, rest, console.Files())
	}
	if id, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix+"apps/"); ok && strings.Contains(strings.ToLower(id), "%2f") {
		// An escaped slash in an app id: one segment, whatever the decoded path shows.
		p, _ := url.PathUnescape(id)
		return invalidAppID(p)
	}
	if strings.HasPrefix(rest, "/") || strings.Contains(rest, "//") {
		// An empty segment, which no route has (ServeMux would redirect to the path without it).
		return noRoute(w, r)
	}
	var err error
	mux.ServeHTTP(w, routed(r, &err))
	return err
}

// errorSlot is the request context key of the *error where a route's handler leaves its error
// for serve, which returns it to Caddy's admin endpoint (that writes {"error": "…"}).
type errorSlot struct{}

// muxHandler adapts h to ServeMux: h's error goes to the request's error slot.
func muxHandler(h caddy.AdminHandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*r.Context().Value(errorSlot{}).(*error) = h(w, r)
	})
}

// routed is r as ServeMux is to route it, with err as its error slot. The routes match the
// decoded path, r.URL.Path, split at every slash, an escaped one included; ServeMux matches
// the escaped path, where an escaped slash is part of a segment, and cleans "." and ".."
// segments away. So the escaped path ServeMux sees is r.URL.Path's segments, each escaped,
// dots too: the segments ServeMux matches, and the {id} it decodes, are r.URL.Path's.
func routed(r *http.Request, err *error) *http.Request {
	segs := strings.Split(r.URL.Path, "/")
	for i, s := range segs {
		segs[i] = strings.ReplaceAll(url.PathEscape(s), ".", "%2E")
	}
	u := *r.URL
	u.RawPath = strings.Join(segs, "/")
	out := r.WithContext(context.WithValue(r.Context(), errorSlot{}, err))
	out.URL = &u
	return out
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
	if capacity, source := lim.Capacity(); capacity > 0 {
		v.Capacity, v.CapacitySource = num(capacity), source
	}
	v.Adaptive = adaptiveView(c)
	tot := totals(c)
	v.Leases, v.LeaseTokens = tot.Leases, tot.LeaseTokens
	if admitted := tot.Requests[store.ReasonNone]; admitted > 0 {
		v.LocalHitRatio = min(float64(tot.LocalHits)/float64(admitted), 1)
	}
	return v
}

// totals is the cluster's cumulative counters as of its history's last reading (taken once a
// second), or read from every app when it keeps no history yet: with tens of thousands of apps,
// that read is most of the overview's time.
func totals(c Cluster) history.Totals {
	if rec := c.History(); rec != nil {
		if t, ok := rec.Totals(); ok {
			return t
		}
	}
	s := c.Limiter().StatsTotals()
	return history.Totals{Requests: s.Requests, Cost: s.Cost, LocalHits: s.LocalHits, Leases: s.Leases, LeaseTokens: s.LeaseTokens}
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

// starPolicy is the policy of unknown apps ("*"): nil when they are rejected (no bucket).
func starPolicy(cfg limiter.Config) *store.AppPolicy {
	if cfg.UnknownApp == limiter.UnknownReject {
		return nil
	}
	return &cfg.Default
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
		q := *p
		q.MaxConnections = maxConnections(id, q, counter)
		pv := newPolicyView(q)
		v.Policy = &pv
	}
	return v
}

func connectionView(s connlimit.Stats) ConnectionView {
	return ConnectionView{
		App: s.App, Current: s.Current, Peak: s.Peak, Limit: s.Limit,
		Remote: s.Remote, Held: s.Held, Rejected: s.Rejected, Leaked: s.Leaked,
	}
}
