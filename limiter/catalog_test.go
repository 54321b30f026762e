package limiter

import (
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestPropCatalogInstall checks install's incremental update against what it must equal, a
// rebuild: after any sequence of configurations (apps added, removed, changed, unchanged), the
// snapshot holds one bucket per configured id with the configured policy; a bucket stays the
// same object (its tokens and statistics) while its id stays configured; the sorted ids are
// those of the configuration; and every bucket whose id left the configuration is retired.
func TestPropCatalogInstall(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := baseConfig()
		l := testLimiter(rt, cfg, memstore.New(nil), clock.NewManual(), false)
		ids := []string{"a", "b", "c", "d", "e"}
		seen := map[string]*App{} // the bucket each configured id had at the last install
		for id := range cfg.Apps {
			seen[id] = l.snap().apps[id]
		}
		for range rapid.IntRange(1, 10).Draw(rt, "installs") {
			next := cfg
			next.Apps = map[string]store.AppPolicy{}
			for _, id := range ids {
				if rapid.Bool().Draw(rt, "configured "+id) {
					g := float64(rapid.IntRange(1, 3).Draw(rt, "guaranteed "+id))
					next.Apps[id] = pol(g, 100, 0)
				}
			}
			if err := l.install(next); err != nil {
				rt.Fatal(err)
			}
			s := l.snap()
			if !maps.EqualFunc(s.apps, next.Apps, func(a *App, p store.AppPolicy) bool { return a.Policy() == p }) {
				rt.Fatalf("buckets %v, want one per app of %v with its policy", s.apps, next.Apps)
			}
			if _, ids := l.ConfigAndIDs(); !slices.Equal(ids, slices.Sorted(maps.Keys(next.Apps))) {
				rt.Fatalf("ids %v, want the sorted ids of %v", ids, next.Apps)
			}
			retired := l.cat.retired.set()
			for id, a := range seen {
				_, still := next.Apps[id]
				switch {
				case still && s.apps[id] != a:
					rt.Fatalf("app %q: a new bucket while it stayed configured", id)
				case !still && !retired[a]:
					rt.Fatalf("app %q: left the configuration and its bucket is not retired", id)
				}
			}
			seen = maps.Clone(s.apps)
		}
	})
}
