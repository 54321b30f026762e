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
//
// # Structure
//
// A Limiter is a composition of parts, each guarding its own state:
//
//	part            type           file                  guarded by
//	buckets         catalog        catalog.go            catalog.mu (install); the snapshot in
//	                                                     force is an atomic pointer
//	  isolated ids  isolatedSet    catalog.go            isolatedSet.mu (RWMutex)
//	  retired apps  retiredSet     catalog.go            retiredSet.mu
//	sync loop list  activeList     active.go             activeList.mu
//	sync loop       syncer         loop.go, report.go,   syncer.mu: serialises tick, report,
//	                               upkeep.go             SetEmergency's report and Close
//	degradation     degrader       level.go, episodes.go degrader.mu; the level is an atomic
//	statistics      statsTally     appstats.go           atomics (and its notice)
//	lost emergency  lostEmergency  emergency.go          lostEmergency.mu
//	override set    overrides      overrides_limiter.go, overrides.mu, held across its Store
//	                               overrides_sync.go     calls
//	one bucket      App            app.go, lease.go      App.mu (lease in flight, rescue
//	                                                     bucket), App.statsMu (statistics
//	                                                     delivery); counters are atomics
//
// L1's state from the last report is an atomic pointer on the Limiter, written only under
// syncer.mu. Takes read it, the snapshot and the level without a lock.
//
// # Lock order
//
// A goroutine holding a lock takes only locks further down this order:
//
//	syncer.mu → overrides.mu → catalog.mu → isolatedSet.mu → activeList.mu
//	                           catalog.mu → retiredSet.mu
//
// The sync loop holds syncer.mu while it reads the overrides (overrides.mu); an override change
// or Update holds overrides.mu while it installs a configuration (catalog.mu), which retires
// buckets (retiredSet.mu), settles isolated ones (isolatedSet.mu) and lists new ones
// (activeList.mu, also taken under isolatedSet.mu when an isolated bucket is built). The
// isolated and retired sets are never held together. degrader.mu, lostEmergency.mu, App.mu,
// App.statsMu and the notices' locks are taken last: nothing is locked while one of them is
// held (isolatedSet.mu and syncer.mu may be held when they are taken).
package limiter
