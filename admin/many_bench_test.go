package admin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// manyCluster is the many-tenants instance of docs/admin-api.md: 19 000 apps from the config,
// 1 000 created through the API, 200 of them with traffic recorded in the history.
func manyCluster(b *testing.B) *testCluster {
	b.Helper()
	c := newCluster(b, "c1", manyConfig(19_000), nil)
	g, burst := 2.0, 20.0
	for i := range 1_000 {
		o := limiter.AppOverride{Guaranteed: &g, Burst: &burst}
		if _, err := c.lim.SetAppOverride(context.Background(), fmt.Sprintf("api%04d", i), &o); err != nil {
			b.Fatal(err)
		}
	}
	c.hist.Record(t0, Read(c))
	for i := range 200 {
		a, _ := c.lim.App(fmt.Sprintf("app%05d", i*90))
		for range 10 {
			a.Record(a.Take(context.Background(), 1, 0).Reason, 1)
		}
	}
	c.hist.Record(t0.Add(1e9), Read(c))
	return c
}

// BenchmarkManyApps measures the admin API's answers with 20 000 apps (docs/admin-api.md has the
// figures and the command).
func BenchmarkManyApps(b *testing.B) {
	c := manyCluster(b)
	a := apiWith(c)
	for _, target := range []string{
		"/rate_limit/", "/rate_limit/apps", "/rate_limit/apps?sort=-admitted&limit=50",
		"/rate_limit/apps?q=app1234", "/rate_limit/apps/app12345", "/rate_limit/connections?sort=-in_flight&limit=50",
	} {
		b.Run("GET "+strings.TrimPrefix(target, "/rate_limit/"), func(b *testing.B) {
			for b.Loop() {
				if w, err := call(a, http.MethodGet, target); err != nil || w.Code != http.StatusOK {
					b.Fatalf("%s: %v %d", target, err, w.Code)
				}
			}
		})
	}
	b.Run("PUT apps/app00042", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			body := fmt.Sprintf(`{"guaranteed": %d, "burst": 100}`, 1+i%50)
			if w, err := send(a, http.MethodPut, "/rate_limit/apps/app00042", body); err != nil || w.Code != http.StatusOK {
				b.Fatalf("PUT: %v %d %s", err, w.Code, w.Body)
			}
		}
	})
	b.Run("PUT apps/<new id>", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if w, err := send(a, http.MethodPut, fmt.Sprintf("/rate_limit/apps/new%05d", i), `{"guaranteed": 1, "burst": 10}`); err != nil || w.Code != http.StatusOK {
				b.Fatalf("PUT: %v %d %s", err, w.Code, w.Body)
			}
		}
	})
}
