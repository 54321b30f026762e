// Package limiter is the L3 tier of tierbucket: per-app local token buckets filled
// by leases from the Store (L2 app buckets and the L1 cluster ledger), plus the Store contract
// and the in-memory Store.
//
// The request path (App, Take, Refund, Charge, Record) is lock-free and allocation-free on a
// local hit and on a local rejection. Decisions that deserve a note:
//
//   - Single-flight: one lease per app is in flight at a time; every request short of tokens
//     waits for it (at most StoreTimeout), a background refill starts when a take leaves the
//     balance below RefillThreshold × the lease target.
//   - Refusal caching: a refused or short lease records when to ask again (the Store's
//     retry-after, but at least the time a lease-sized batch needs to refill, at most the refill
//     horizon); until then shortfalls are rejected locally with no Store call, unless the local
//     tokens plus what L2 held at the last lease cover them: the refusal was about the refused
//     request's need, and a cheaper request L2 can still cover may lease (a short lease made
//     so keeps the refusal's later retry time and reason).
//   - Lease target: the app's consumption rate (moving average) × its horizon (LeaseHorizon, or
//     3 sync intervals while L2 is near empty; before a rate is measured: Reserve), × 2 / × 5
//     when the Store is slow, at most burst / (2 × live instances), at least 1 and the need
//     (docs/design.md, "Lease sizes").
//   - A request costing more than the burst is admitted when a full burst can be taken; the
//     excess is local debt, paid by the next lease. Charge (settlement) also never rejects:
//     its shortfall becomes debt. Refund restores the balance exactly.
//   - Lease TTL is approximated with one lease time per app (the last grant): when it is older
//     than LeaseTTL, everything above one refill horizon's worth at the current rate goes back.
//   - Unknown apps: shared (one "*" bucket), isolated (one bucket per id up to MaxIsolated,
//     idle ones expire after IsolatedTTL and return their tokens; beyond the bound new ids use
//     the shared bucket), or reject. All unknown apps report metrics under the label "*".
//   - Degradation: the Store's latency moving average sets normal / mild / significant; a
//     Store call that failed (an error, or its own background timeout) sets fail-open, which
//     only a successful report (the probe, once a second) leaves. In fail-open, local tokens
//     are still spent first; then the rescue bucket (FailLocal), admit (FailOpen) or 503
//     (FailClosed). Tokens admitted without a lease in fail-open are counted as minted, so
//     conservation reads leased + minted = consumed + returned + dropped + held (dropped: see
//     below).
//   - A request that gives up waiting (StoreTimeout) for a lease still in flight does not set
//     fail-open: the Store is slow, not known to have failed, and the lease will be applied.
//     It is admitted on credit if the rescue bucket allows it (in every failure mode): its cost
//     becomes local debt, which the lease in flight (or the next one) pays, so nothing is
//     minted and L2 stays the one source of tokens; otherwise it is rejected (app_exhausted,
//     retry after StoreTimeout). Minting on a slow lease used to admit the rescue tokens on top
//     of the grant that arrived later.
//   - The rescue bucket (rate guaranteed × RescueRatio / live instances, burst the same share
//     of the app's burst) is persistent: it refills lazily with elapsed time and starts full
//     once, so fail-open episodes in quick succession share one burst instead of each
//     starting with a full one.
//   - Store calls whose outcome is unknown (an error or timeout may come after the Store
//     applied the call) err towards under-admission, never over-admission: a failed Return
//     drops its tokens locally (counted as dropped) instead of keeping them, since they may
//     already be back in L2; a lease whose reply is lost likewise loses its grant. L2 refills
//     either way, so each failure costs at most one lease's worth of tokens per app, and no
//     token is ever spendable twice. Reports are idempotent instead (see Statistics).
//   - Background Store calls (leases, reports, returns) are bounded by max(StoreTimeout, 1 s)
//     so that a slow Store can be measured; no request waits longer than StoreTimeout. With a
//     StoreTimeout below 100 ms the significant level is therefore seen only between probes.
//   - Statistics travel with the app's leases, numbered and applied once; only an app whose
//     statistics waited StatsInterval or SyncBatch requests is flushed by the cluster report
//     (docs/design.md, "Statistics"). Refund lowers the pending cost (a negative balance waits
//     for later consumption); the request count is not lowered.
//   - Close sends the pending cost and every app's statistics, and returns every
//     local token (dropping them if the Return fails); it does not close the Store. Takes
//     after Close are rejected with ReasonRedisUnavailable.
package limiter
