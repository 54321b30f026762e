// Package limiter is the L3 tier of tierbucket: per-app local token buckets filled by leases
// from a store.Store (the L2 app buckets and the L1 cluster ledger, shared by the fleet).
//
// A decision on a local hit or a local rejection takes no lock and allocates nothing; the Store
// is called in batches (leases, returns, one cluster report per sync interval), never per
// request. Tokens are conserved: leased + minted = consumed + returned + dropped + held, and a
// Store call whose outcome is unknown is resolved towards admitting less, never more.
//
// How leases are sized, how statistics travel, and how the limiter degrades when the Store is
// slow or failing are described in docs/design.md.
package limiter
