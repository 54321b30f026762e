package admin

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// GET /rate_limit/apps is one page of the cluster's apps (docs/admin-api.md, "Many apps"): the
// configured ones (the Caddyfile's and those created through the API), "*" (every unknown app
// together) and the active isolated tenants. A page reads the figures of its own apps only; the
// rest of the list costs an id and a sort key per app, so that a page answers in milliseconds
// with tens of thousands of apps.

const (
	// DefaultPageSize is the page size without ?limit; MaxPageSize the largest ?limit.
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// SourceIsolated is the source of an active isolated tenant (unknown_app isolated): an unknown
// id with a bucket of its own and the `app *` template's policy.
const SourceIsolated = "isolated"

// sortKeys are the orders of ?sort (a "-" prefix reverses them). The live figures are those of
// the last history.LiveWindow seconds; in_flight is this instance's count now.
var sortKeys = []string{"id", "admitted", "rejected", "cost", "in_flight"}

// AppsView is GET /rate_limit/apps: one page of apps in the requested order.
type AppsView struct {
	Cluster    string    `json:"cluster"`
	Apps       []AppView `json:"apps"`
	Total      int       `json:"total"`       // apps matching ?q, on every page
	NextCursor *string   `json:"next_cursor"` // the next page's ?cursor; null on the last page
	Sort       string    `json:"sort"`
	LiveWindow int       `json:"live_window_seconds"` // the window of each app's "live" figures
}

// listQuery is a parsed GET /rate_limit/apps.
type listQuery struct {
	limit  int
	q      string
	sort   string // one of sortKeys
	desc   bool
	after  *cursor // nil: the first page
	sorted string  // ?sort as given (normalised): the cursor's
}

// cursor is the position after the last app of a page: its sort key and id, with the order and
// filter it belongs to. Encoded as base64url JSON: opaque to clients.
type cursor struct {
	Sort string `json:"s"`
	Q    string `json:"q"`
	Key  int64  `json:"k"`
	ID   string `json:"id"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// one returns the single value of parameter name (400 when given more than once).
func one(q url.Values, name string) (string, error) {
	if v := q[name]; len(v) > 1 {
		return "", badParam(name, "given %d times: give it once", len(v))
	}
	return q.Get(name), nil
}

// badParam is the 400 of a bad query parameter, naming it.
func badParam(name, format string, args ...any) error {
	return fieldsError{
		msg:    "invalid ?" + name + ": " + fmt.Sprintf(format, args...),
		fields: map[string]string{name: fmt.Sprintf(format, args...)},
	}
}

// parseList reads ?limit, ?cursor, ?q and ?sort.
func parseList(q url.Values) (listQuery, error) {
	lq := listQuery{limit: DefaultPageSize, sort: "id", sorted: "id"}
	if s, err := one(q, "limit"); err != nil {
		return lq, err
	} else if q.Has("limit") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize || s[0] == '+' {
			return lq, badParam("limit", "must be a whole number from 1 to %d, got %q", MaxPageSize, s)
		}
		lq.limit = n
	}
	s, err := one(q, "q")
	if err != nil {
		return lq, err
	}
	if len(s) > 128 {
		return lq, badParam("q", "at most 128 characters (an app id's length), got %d", len(s))
	}
	lq.q = s
	if s, err = one(q, "sort"); err != nil {
		return lq, err
	} else if q.Has("sort") {
		key, desc := strings.CutPrefix(s, "-")
		if !slices.Contains(sortKeys, key) {
			return lq, badParam("sort", "must be one of %s, with a \"-\" prefix for descending, got %q", strings.Join(sortKeys, ", "), s)
		}
		lq.sort, lq.desc, lq.sorted = key, desc, s
	}
	if s, err = one(q, "cursor"); err != nil {
		return lq, err
	} else if q.Has("cursor") {
		var c cursor
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		if err != nil || c.ID == "" {
			return lq, badParam("cursor", "not a cursor of this API: pass a page's next_cursor as it is")
		}
		if c.Sort != lq.sorted || c.Q != lq.q {
			return lq, badParam("cursor", "belongs to sort=%q q=%q, not to sort=%q q=%q: keep sort and q across pages",
				c.Sort, c.Q, lq.sorted, lq.q)
		}
		lq.after = &c
	}
	return lq, nil
}

// entry is one app of the list: its id and sort key.
type entry struct {
	id  string
	key int64
}

// appsPage is GET /rate_limit/apps.
func appsPage(c Cluster, params url.Values) (any, error) {
	lq, err := parseList(params)
	if err != nil {
		return nil, err
	}
	pg := paginate(ordered(c, lq, isolatedIDs(c.Limiter())))(lq)
	v := AppsView{
		Cluster: c.ID(), Apps: make([]AppView, 0, len(pg.entries)), Total: pg.total,
		NextCursor: pg.next, Sort: lq.sorted, LiveWindow: history.LiveWindow,
	}
	for _, e := range pg.entries {
		if a, err := appView(c, e.id); err == nil { // an isolated tenant may expire meanwhile
			v.Apps = append(v.Apps, a)
		}
	}
	return v, nil
}

// listPage is one page of a list: its entries, how many match in all, and the next page's cursor
// (nil on the last page).
type listPage struct {
	entries []entry
	total   int
	next    *string
}

// paginate cuts the page lq asks for out of entries in the order less.
func paginate(entries []entry, less func(a, b entry) int) func(lq listQuery) listPage {
	return func(lq listQuery) listPage {
		start := 0
		if lq.after != nil {
			at := entry{id: lq.after.ID, key: lq.after.Key}
			start, _ = slices.BinarySearchFunc(entries, at, less)
			if start < len(entries) && entries[start] == at {
				start++
			}
		}
		end := min(start+lq.limit, len(entries))
		pg := listPage{entries: entries[start:end], total: len(entries)}
		if end < len(entries) {
			last := entries[end-1]
			next := cursor{Sort: lq.sorted, Q: lq.q, Key: last.key, ID: last.id}.encode()
			pg.next = &next
		}
		return pg
	}
}

// isolatedIDs are the active isolated tenants that are not configured apps, sorted.
func isolatedIDs(lim *limiter.Limiter) []string {
	cfg := lim.Config()
	var ids []string
	for _, st := range lim.IsolatedStats() {
		if _, configured := cfg.Apps[st.Label]; !configured {
			ids = append(ids, st.Label)
		}
	}
	slices.Sort(ids)
	return ids
}

// ordered is every app matching lq.q in the order lq asks for, and that order. The apps come
// in id order ("*" last) from the sorted configured ids and isolated, the sorted ids to list
// that are not configured; those with a figure (few: the active ones) are sorted apart and put
// first or last, so that tens of thousands of idle apps cost a pass, not a sort.
func ordered(c Cluster, lq listQuery, isolated []string) (entries []entry, less func(a, b entry) int) {
	key := sortKey(c, lq.sort)
	_, ids := c.Limiter().ConfigAndIDs()
	entries = make([]entry, 0, len(ids)+len(isolated)+1)
	var busy []entry
	add := func(id string) {
		if !strings.Contains(id, lq.q) {
			return
		}
		if e := (entry{id: id, key: key(id)}); e.key > 0 { // keys are counts: never negative
			busy = append(busy, e)
		} else {
			entries = append(entries, e)
		}
	}
	for i, j := 0, 0; i < len(ids) || j < len(isolated); {
		if j == len(isolated) || i < len(ids) && ids[i] < isolated[j] {
			add(ids[i])
			i++
		} else {
			add(isolated[j])
			j++
		}
	}
	add(wildcardApp)
	less = func(a, b entry) int {
		if a.key != b.key {
			if (a.key < b.key) != lq.desc {
				return -1
			}
			return 1
		}
		if lq.desc && lq.sort == "id" {
			return idCompare(b.id, a.id)
		}
		return idCompare(a.id, b.id) // ties of a figure: in id order
	}
	slices.SortFunc(busy, less)
	switch {
	case lq.desc && lq.sort == "id":
		slices.Reverse(entries)
	case lq.desc:
		entries = append(busy, entries...)
	default:
		entries = append(entries, busy...)
	}
	return entries, less
}

// idCompare orders app ids: by their bytes, with "*" (every unknown app) after every id.
func idCompare(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == wildcardApp:
		return 1
	case b == wildcardApp:
		return -1
	}
	return strings.Compare(a, b)
}

// sortKey returns the function giving an app's key in the order sort (0 for "id": the id
// orders).
func sortKey(c Cluster, sort string) func(id string) int64 {
	switch sort {
	case "admitted", "rejected", "cost":
		var live map[string]history.Live
		if rec := c.History(); rec != nil {
			live = rec.LiveAll()
		}
		return func(id string) int64 {
			l := live[id]
			switch sort {
			case "admitted":
				return l.Allowed
			case "rejected":
				return l.Rejected
			}
			return l.Cost
		}
	case "in_flight":
		apps, _ := c.Connections().InFlight()
		if apps == nil { // with slots: the counter's own figures
			apps = map[string]int64{}
			for _, s := range c.Connections().Snapshot() {
				apps[s.App] = s.Current
			}
		}
		return func(id string) int64 { return apps[id] }
	}
	return func(string) int64 { return 0 }
}

// appView is GET /rate_limit/apps/<id>: a configured app, "*", or an active isolated tenant. It
// reads that app only.
func appView(c Cluster, id string) (AppView, error) {
	lim, counter := c.Limiter(), c.Connections()
	cfg := lim.Config()
	s, isolated, ok := lim.AppStatsOf(id)
	if id == wildcardApp && !ok { // unknown_app reject: no bucket, the rejections only
		s, ok = limiter.AppStats{Label: wildcardApp}, true
	}
	if !ok {
		if _, ok, why := lim.StoredAppOverride(id); ok && why != nil {
			return AppView{}, apiError(http.StatusNotFound, "app %q of cluster %q exists through an admin override "+
				"that this instance leaves out (%v): change it, or remove it with DELETE", id, c.ID(), why)
		}
		return AppView{}, apiError(http.StatusNotFound, "unknown app %q in cluster %q (not configured, and not an "+
			"active isolated tenant: unknown apps are shown as %q)", id, c.ID(), wildcardApp)
	}
	if id == wildcardApp {
		s = withPreApp(c, s)
	}
	cs, _ := counter.AppStats(id)
	var v AppView
	switch p, configured := cfg.Apps[id]; {
	case configured:
		v = newAppView(id, &p, s, cs, counter)
		v.Source = lim.AppSource(id)
		if o, ok, why := lim.StoredAppOverride(id); ok && why != nil {
			v.OverrideNotApplied = &NotAppliedView{Override: overrideFields(&o), Reason: why.Error()}
		} else if ok {
			v.Override = overrideFields(&o)
		}
	case isolated:
		v = newAppView(id, &cfg.Default, s, cs, counter)
		v.Source = SourceIsolated
	default:
		v = newAppView(id, starPolicy(cfg), s, cs, counter)
	}
	if rec := c.History(); rec != nil {
		v.Live = rec.Live(id)
	}
	return v, nil
}

// withPreApp adds to "*" the decisions the root takes before there is an app (an invalid id, an
// unknown app rejected), as the metrics count them.
func withPreApp(c Cluster, s limiter.AppStats) limiter.AppStats {
	if pc, ok := c.(PreAppCounter); ok {
		invalid, unknown := pc.PreAppRejections()
		s.Requests[store.ReasonInvalidAppID] += invalid
		s.Requests[store.ReasonUnknownApp] += unknown
	}
	return s
}
