// Package metrics exports the rate limiter's figures to Prometheus on Caddy's metrics
// registry, as caddy_rate_limit_* series:
//
//   - a Collector that reads every live cluster's own atomic counters at scrape time, so the
//     request path never calls into Prometheus;
//   - Store, a store.Store wrapper that times every Store call and counts the failed ones.
//
// Labels are cluster and app, where app is a configured app id or "*" (every unknown app
// together): cardinality is bounded by the configuration.
package metrics
