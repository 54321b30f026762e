// Package promhistory reads a cluster's long history (an hour to a week) from a Prometheus
// server that scrapes the gateways' metrics, so the admin API can answer the console's long
// ranges while the browser talks only to the admin endpoint (docs/console.md). The short
// history (15 minutes, per second) stays in memory, in package history.
//
// A Source runs Prometheus' range queries (GET /api/v1/query_range) over the plugin's own
// series and returns one Point per step, the fleet's figures summed over every instance
// Prometheus scrapes.
package promhistory

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Range is a span of history with its resolution.
type Range struct {
	Name   string        // as the API takes it: 1h, 6h, 24h, 7d
	Span   time.Duration // how far back from now
	Step   time.Duration // one point per step
	Window time.Duration // the rate() window: at least a minute, so a 15 s scrape interval has samples in it
}

// Ranges are the ranges a Source answers, shortest first.
var Ranges = []Range{
	{Name: "1h", Span: time.Hour, Step: 15 * time.Second, Window: time.Minute},
	{Name: "6h", Span: 6 * time.Hour, Step: time.Minute, Window: 2 * time.Minute},
	{Name: "24h", Span: 24 * time.Hour, Step: 5 * time.Minute, Window: 10 * time.Minute},
	{Name: "7d", Span: 7 * 24 * time.Hour, Step: 30 * time.Minute, Window: time.Hour},
}

// ParseRange returns the Range named name.
func ParseRange(name string) (Range, error) {
	names := make([]string, len(Ranges))
	for i, r := range Ranges {
		if r.Name == name {
			return r, nil
		}
		names[i] = r.Name
	}
	return Range{}, fmt.Errorf("must be one of %s, got %q", strings.Join(names, ", "), name)
}

// Point is the fleet's figures over one step. Rates are per second, averaged over the rate
// window ending at T; levels are the value at T. A figure Prometheus has no sample for is 0.
type Point struct {
	T         int64              `json:"t"`        // unix seconds
	Admitted  float64            `json:"admitted"` // requests/s
	Rejected  float64            `json:"rejected"` // requests/s
	Reasons   map[string]float64 `json:"reasons"`  // rejections/s by reason (none: left out)
	Cost      float64            `json:"cost"`     // admitted cost tokens/s
	Usage     float64            `json:"usage"`    // L1 usage (fleet: the highest instance's view)
	Capacity  float64            `json:"capacity"` // L1 capacity in force (configured, learned or pinned); 0: none
	InFlight  float64            `json:"in_flight"`
	Instances int                `json:"instances"` // gateways reporting the cluster
}

// Source queries one Prometheus server.
type Source struct {
	base   *url.URL
	client *http.Client
}

// QueryTimeout bounds each query: the console waits for the answer.
const QueryTimeout = 10 * time.Second

// ValidateURL checks a Prometheus server's address as an operator writes it: http or https,
// a host, no query or fragment. Errors never repeat the address's credentials.
func ValidateURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("prometheus: not a URL (want http://host:port)")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("prometheus: %s: the scheme must be http or https", u.Redacted())
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("prometheus: %s: want http[s]://host[:port][/path], with no query or fragment", u.Redacted())
	}
	return u, nil
}

// New returns a Source for the server at raw (ValidateURL's form).
func New(raw string) (*Source, error) {
	u, err := ValidateURL(raw)
	if err != nil {
		return nil, err
	}
	return &Source{base: u, client: &http.Client{Timeout: QueryTimeout}}, nil
}

// Address is the server's address without credentials, for messages.
func (s *Source) Address() string { return s.base.Redacted() }

// Fleet is the cluster's history over r, ending at end.
func (s *Source) Fleet(ctx context.Context, cluster string, r Range, end time.Time) ([]Point, error) {
	return s.points(ctx, cluster, "", r, end)
}

// App is one app's history over r, ending at end.
func (s *Source) App(ctx context.Context, cluster, app string, r Range, end time.Time) ([]Point, error) {
	return s.points(ctx, cluster, app, r, end)
}

// selector is the label matchers of a cluster (and an app). %q quotes as PromQL's string
// literals expect (Go's escapes), so no id can change the query.
func selector(cluster, app string) string {
	if app == "" {
		return fmt.Sprintf("cluster=%q", cluster)
	}
	return fmt.Sprintf("cluster=%q,app=%q", cluster, app)
}

// points runs one range query per figure and lays the answers out on the step grid. The
// usage and the instance count are the cluster's, on an app's page too.
func (s *Source) points(ctx context.Context, cluster, app string, r Range, end time.Time) ([]Point, error) {
	sel, clusterSel := selector(cluster, app), selector(cluster, "")
	inFlight := "caddy_rate_limit_cluster_connections"
	if app != "" {
		inFlight = "caddy_rate_limit_connections"
	}
	end = end.Truncate(time.Second) // the newest point is now, with the last scrape in it
	start := end.Add(-r.Span)
	n := int(r.Span/r.Step) + 1
	pts := make([]Point, n)
	for i := range pts {
		pts[i].T = start.Add(time.Duration(i) * r.Step).Unix()
	}
	at := func(t float64) *Point {
		i := int((int64(t) - pts[0].T) / int64(r.Step/time.Second))
		if i < 0 || i >= n || pts[i].T != int64(t) {
			return nil
		}
		return &pts[i]
	}
	w := promDuration(r.Window)
	queries := []struct {
		expr string
		set  func(p *Point, labels map[string]string, v float64)
	}{
		{
			fmt.Sprintf(`sum(rate(caddy_rate_limit_requests_total{%s,decision="allowed"}[%s]))`, sel, w),
			func(p *Point, _ map[string]string, v float64) { p.Admitted = v },
		},
		{
			fmt.Sprintf(`sum by (reason) (rate(caddy_rate_limit_requests_total{%s,decision="rejected"}[%s]))`, sel, w),
			func(p *Point, l map[string]string, v float64) {
				if v == 0 {
					return
				}
				if p.Reasons == nil {
					p.Reasons = map[string]float64{}
				}
				p.Reasons[l["reason"]] += v
				p.Rejected += v
			},
		},
		{
			fmt.Sprintf(`sum(rate(caddy_rate_limit_cost_total{%s}[%s]))`, sel, w),
			func(p *Point, _ map[string]string, v float64) { p.Cost = v },
		},
		{
			fmt.Sprintf(`max(caddy_rate_limit_cluster_usage_ratio{%s})`, clusterSel),
			func(p *Point, _ map[string]string, v float64) { p.Usage = v },
		},
		{
			fmt.Sprintf(`max(caddy_rate_limit_capacity_tokens{%s})`, clusterSel),
			func(p *Point, _ map[string]string, v float64) { p.Capacity = v },
		},
		{
			fmt.Sprintf(`sum(%s{%s})`, inFlight, sel),
			func(p *Point, _ map[string]string, v float64) { p.InFlight = v },
		},
		{
			fmt.Sprintf(`count(caddy_rate_limit_degradation_level{%s})`, clusterSel),
			func(p *Point, _ map[string]string, v float64) { p.Instances = int(v) },
		},
	}
	for _, q := range queries {
		series, err := s.queryRange(ctx, q.expr, start, end, r.Step)
		if err != nil {
			return nil, err
		}
		for _, ser := range series {
			for _, sv := range ser.Values {
				if p := at(sv.T); p != nil {
					q.set(p, ser.Metric, sv.V)
				}
			}
		}
	}
	return pts, nil
}

// promDuration writes d as PromQL's duration literal (whole seconds).
func promDuration(d time.Duration) string {
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}
