// Package cluster keeps each rate-limit cluster's shared state across config reloads: the
// limiter (L3 buckets and the sync loop), the in-flight counter, the Store, the per-second
// history, and the counts of decisions taken before there is an app.
//
// The states live in a caddy.UsagePool keyed by cluster id and Store identity, as
// reverse_proxy keeps its upstream hosts. A reload provisions the new handlers before the old
// ones are cleaned up, so a state's reference count never drops to zero in between and the new
// policy is applied to the live buckets: tokens and in-flight counts stay. The last handler
// to let go closes the state, which returns its unspent tokens and sends its last statistics.
package cluster
