package admin

import (
	"net/http"
	"net/url"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/promhistory"
	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// The long ranges of the history route (docs/admin-api.md):
//
//	GET /rate_limit/history?range=1h|6h|24h|7d[&app=<id>]   RangeView

// PrometheusSource may be implemented by a Cluster whose configuration names a Prometheus
// server for the long ranges.
type PrometheusSource interface {
	Prometheus() string // the server's address; empty: none
}

// RangeView is GET /rate_limit/history?range=…: the fleet's (or one app's) figures over the
// range, one point per step, read from Prometheus. Without a Prometheus server, Available is
// false and Reason says why and what to configure.
type RangeView struct {
	Cluster     string              `json:"cluster"`
	App         string              `json:"app,omitempty"`
	Range       string              `json:"range"`
	StepSeconds int                 `json:"step_seconds"`
	Available   bool                `json:"available"`
	Reason      string              `json:"reason,omitempty"`
	Source      string              `json:"source,omitempty"` // the Prometheus server, without credentials
	Points      []promhistory.Point `json:"points"`           // oldest first
}

// now is the end of every range (tests replace it).
var now = time.Now

func rangeView(r *http.Request, c Cluster, q url.Values) (any, error) {
	if q.Has("seconds") || len(q["range"]) > 1 || len(q["app"]) > 1 {
		return nil, apiError(http.StatusBadRequest, "range: give it once, with at most one app and without seconds")
	}
	rg, err := promhistory.ParseRange(q.Get("range"))
	if err != nil {
		return nil, apiError(http.StatusBadRequest, "range: %v", err)
	}
	app := q.Get("app")
	if q.Has("app") && !limiter.ValidAppID(app) {
		return nil, invalidAppID(app)
	}
	v := RangeView{Cluster: c.ID(), App: app, Range: rg.Name, StepSeconds: int(rg.Step / time.Second), Points: []promhistory.Point{}}
	var addr string
	if ps, ok := c.(PrometheusSource); ok {
		addr = ps.Prometheus()
	}
	if addr == "" {
		v.Reason = "no Prometheus server is configured: ranges beyond 15 minutes are read from one " +
			"scraping the gateways (console { prometheus <url> } in the rate_limit block)"
		return v, nil
	}
	src, err := promhistory.New(addr)
	if err != nil {
		return nil, apiError(http.StatusInternalServerError, "%v", err)
	}
	v.Source = src.Address()
	end := now()
	if app == "" {
		v.Points, err = src.Fleet(r.Context(), c.ID(), rg, end)
	} else {
		v.Points, err = src.App(r.Context(), c.ID(), app, rg, end)
	}
	if err != nil {
		return nil, apiError(http.StatusBadGateway, "%v", err)
	}
	v.Available = true
	return v, nil
}
