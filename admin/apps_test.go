package admin

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// manyConfig is n configured apps app00000… (guaranteed 1, burst 10).
func manyConfig(n int) limiter.Config {
	cfg := limiter.Config{Apps: map[string]store.AppPolicy{}, Default: store.AppPolicy{Guaranteed: 1, Burst: 10}}
	for i := range n {
		cfg.Apps[fmt.Sprintf("app%05d", i)] = store.AppPolicy{Guaranteed: 1, Burst: 10}
	}
	return cfg
}

// fataler is what page and walk need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// page GETs one page of target and decodes it.
func page(t fataler, a API, target string) AppsView {
	t.Helper()
	w, err := call(a, http.MethodGet, target)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	var v AppsView
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || w.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, w.Code, w.Body)
	}
	return v
}

// walk follows next_cursor from the first page of query and returns every id in order and the
// number of pages.
func walk(t fataler, a API, query string) (ids []string, pages int) {
	t.Helper()
	target := "/rate_limit/apps?" + query
	for {
		v := page(t, a, target)
		pages++
		if len(v.Apps) == 0 && v.NextCursor != nil {
			t.Fatalf("empty page with a next cursor")
		}
		for _, app := range v.Apps {
			ids = append(ids, app.ID)
		}
		if v.NextCursor == nil {
			return ids, pages
		}
		target = "/rate_limit/apps?" + query + "&cursor=" + url.QueryEscape(*v.NextCursor)
	}
}

// TestAppsPagination: the default page is bounded, and following next_cursor lists every app
// once, in id order with "*" last, the total on every page.
func TestAppsPagination(t *testing.T) {
	c := newCluster(t, "c1", manyConfig(250), nil)
	a := apiWith(c)
	first := page(t, a, "/rate_limit/apps")
	if len(first.Apps) != DefaultPageSize || first.Total != 251 || first.NextCursor == nil || first.Sort != "id" || first.LiveWindow != history.LiveWindow {
		t.Fatalf("first page: %d apps, total %d, next %v, sort %q, window %d", len(first.Apps), first.Total, first.NextCursor, first.Sort, first.LiveWindow)
	}
	ids, pages := walk(t, a, "limit=100")
	want := slices.Sorted(func(yield func(string) bool) {
		for id := range c.lim.Config().Apps {
			if !yield(id) {
				return
			}
		}
	})
	want = append(want, "*")
	if pages != 3 || !slices.Equal(ids, want) {
		t.Fatalf("%d pages, ids %d (first %v), want 3 pages of every app in order, * last", pages, len(ids), ids[:3])
	}
	got := page(t, a, "/rate_limit/apps?q=app0012&limit=5")
	if got.Total != 10 || len(got.Apps) != 5 || got.Apps[0].ID != "app00120" || got.NextCursor == nil {
		t.Errorf("q=app0012: total %d, %d apps, first %q", got.Total, len(got.Apps), got.Apps[0].ID)
	}
	if one := page(t, a, "/rate_limit/apps?sort=-id&limit=2"); one.Apps[0].ID != "*" || one.Apps[1].ID != "app00249" {
		t.Errorf("sort=-id: %s, %s", one.Apps[0].ID, one.Apps[1].ID)
	}
}

// TestAppsSortByLive: sort=-admitted orders by the live window's admitted requests, which each
// app shows (the app's page too).
func TestAppsSortByLive(t *testing.T) {
	c := newCluster(t, "c1", manyConfig(20), nil)
	c.hist.Record(t0, Read(c))
	take(t, c, "app00003", 5)
	take(t, c, "app00011", 8)
	take(t, c, "app00007", 1)
	c.hist.Record(t0.Add(time.Second), Read(c))
	v := page(t, apiWith(c), "/rate_limit/apps?sort=-admitted&limit=4")
	var got []string
	for _, app := range v.Apps {
		got = append(got, fmt.Sprintf("%s:%d", app.ID, app.Live.Allowed))
	}
	if want := []string{"app00011:8", "app00003:5", "app00007:1", "app00000:0"}; !slices.Equal(got, want) {
		t.Errorf("sort=-admitted: %v, want %v", got, want)
	}
	var one AppView
	get(t, apiWith(c), "/rate_limit/apps/app00011", &one)
	if one.Live.Allowed != 8 || one.Live.Cost != 8 {
		t.Errorf("app00011's live figures: %+v", one.Live)
	}
}

// TestAppsIsolatedTenants: an active isolated tenant is listed (source "isolated", the
// template's policy, its own counts) and found by id.
func TestAppsIsolatedTenants(t *testing.T) {
	cfg := testConfig()
	cfg.UnknownApp = limiter.UnknownIsolated
	c := newCluster(t, "c1", cfg, nil)
	take(t, c, "hammer", 4)
	v := page(t, apiWith(c), "/rate_limit/apps?q=ham")
	if v.Total != 1 || len(v.Apps) != 1 {
		t.Fatalf("q=ham: %+v", v)
	}
	h := v.Apps[0]
	if h.ID != "hammer" || h.Source != SourceIsolated || h.Requests.Allowed != 4 || h.Policy == nil || h.Policy.Guaranteed != 100 {
		t.Errorf("isolated tenant: %+v", h)
	}
	var one AppView
	get(t, apiWith(c), "/rate_limit/apps/hammer", &one)
	if one.Source != SourceIsolated || one.Requests.Allowed != 4 {
		t.Errorf("apps/hammer: %+v", one)
	}
	if all := page(t, apiWith(c), "/rate_limit/apps"); all.Total != 4 {
		t.Errorf("total %d, want alpha, beta, * and hammer", all.Total)
	}
}

// TestAppsBadParameters: a bad parameter is a 400 naming it.
func TestAppsBadParameters(t *testing.T) {
	c := newCluster(t, "c1", manyConfig(5), nil)
	a := apiWith(c)
	other := cursor{Sort: "-cost", ID: "app00001"}.encode()
	for query, param := range map[string]string{
		"limit=0": "limit", "limit=1001": "limit", "limit=ten": "limit", "limit=1&limit=2": "limit",
		"sort=size": "sort", "sort=--id": "sort", "cursor=%25%25": "cursor", "cursor=" + other: "cursor",
		"q=" + strings.Repeat("x", 129): "q",
	} {
		w, err := call(a, http.MethodGet, "/rate_limit/apps?"+query)
		var body struct {
			Error  string            `json:"error"`
			Fields map[string]string `json:"fields"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		if err != nil || w.Code != http.StatusBadRequest || body.Fields[param] == "" || !strings.Contains(body.Error, "?"+param) {
			t.Errorf("%s: %d %s (%v), want a 400 naming %s", query, w.Code, w.Body, err, param)
		}
	}
}

// TestAppsPagesProperty: for any set of apps, live figures, page size and order, following
// next_cursor lists every app exactly once in the order asked for.
func TestAppsPagesProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 60).Draw(rt, "apps")
		cfg := manyConfig(n)
		cfg.UnknownApp = limiter.UnknownIsolated
		c := newCluster(t, "c1", cfg, nil)
		busy := map[string]int{"*": 0}
		apps := slices.Sorted(maps.Keys(cfg.Apps))
		for _, i := range rapid.SliceOfDistinct(rapid.IntRange(0, 70), rapid.ID).Draw(rt, "isolated") {
			id := fmt.Sprintf("app%05dx", i) // isolated tenants among the configured ids
			c.lim.App(id)
			apps = append(apps, id)
		}
		c.hist.Record(t0, Read(c))
		for _, id := range apps {
			k := rapid.IntRange(0, 3).Draw(rt, "take-"+id)
			busy[id] = k
			if _, configured := cfg.Apps[id]; !configured {
				busy["*"] += k // every unknown app's decisions count under "*" too
			}
			if k > 0 {
				take(t, c, id, k)
			}
		}
		c.hist.Record(t0.Add(time.Second), Read(c))
		limit := rapid.IntRange(1, 20).Draw(rt, "limit")
		order := rapid.SampledFrom([]string{"id", "-id", "admitted", "-admitted"}).Draw(rt, "sort")
		ids, _ := walk(rt, apiWith(c), fmt.Sprintf("limit=%d&sort=%s", limit, order))
		want := make([]string, 0, len(busy))
		for id := range busy {
			want = append(want, id)
		}
		key := func(id string) int {
			if strings.HasSuffix(order, "id") {
				return 0
			}
			return busy[id]
		}
		slices.SortFunc(want, func(x, y string) int {
			if kx, ky := key(x), key(y); kx != ky {
				if (kx < ky) != strings.HasPrefix(order, "-") {
					return -1
				}
				return 1
			}
			if order == "-id" {
				x, y = y, x
			}
			switch { // "*" after every id
			case x == "*":
				return 1
			case y == "*":
				return -1
			}
			return strings.Compare(x, y)
		})
		if !slices.Equal(ids, want) {
			rt.Fatalf("sort=%s limit=%d:\n got %v\nwant %v", order, limit, ids, want)
		}
	})
}

// TestOverviewFromHistory: with a history, the overview's lease and hit figures are the last
// reading's totals, which are every app's (the isolated tenants' counted once, under "*").
func TestOverviewFromHistory(t *testing.T) {
	cfg := testConfig()
	cfg.UnknownApp = limiter.UnknownIsolated
	c := newCluster(t, "c1", cfg, nil)
	take(t, c, "beta", 9)
	take(t, c, "tenant", 4)
	c.hist.Record(t0, Read(c))
	want := c.lim.StatsTotals()
	var v ClusterView
	get(t, apiWith(c), "/rate_limit/", &v)
	ratio := min(float64(want.LocalHits)/float64(want.Requests[store.ReasonNone]), 1)
	if v.Leases != want.Leases || v.LeaseTokens != want.LeaseTokens || v.LocalHitRatio != ratio || want.Leases == 0 {
		t.Errorf("overview leases %d tokens %d ratio %v, want %d %d %v", v.Leases, v.LeaseTokens, v.LocalHitRatio, want.Leases, want.LeaseTokens, ratio)
	}
}
