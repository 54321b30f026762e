package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store holds the state that the tiers above L3 share: the L2 app buckets and the L1 cluster
// ledger. The memory store (the embedded default) and the Redis store (package redislua) have
// identical semantics; one behavioural suite (package store/storetest) runs against both.
//
// Calls are stateless with respect to configuration: every call carries the policy it needs, so a
// config reload, or several instances with slightly different configs, never leaves the Store
// with a stale copy. Amounts are cost tokens; rates are cost tokens per second.
type Store interface {
	// Lease takes tokens from the app's L2 bucket after refilling it (refill pays debt first).
	// It grants Want if the bucket holds that many, otherwise as many whole tokens as it holds
	// if that is at least Need, otherwise nothing (Granted 0, with Reason and RetryAfter set).
	// During an app's warm-up (AppPolicy.Warmup) the grant is further capped by the ramp.
	// When the bucket cannot cover Need, the app may borrow the shortfall from L1's pool
	// (see LeaseRequest.Unallocated).
	Lease(ctx context.Context, req LeaseRequest) (Lease, error)

	// Return gives unspent leased tokens back to the app's L2 bucket (never above burst). It
	// does not refill the bucket: a refill at any other factor than L1's would let a throttled
	// app earn tokens at the wrong rate; the next lease refills the elapsed time at its factor.
	Return(ctx context.Context, ret Return) error

	// Report sends one instance's statistics for the interval since its last report. It never
	// debits tokens (they were debited at lease time). It refreshes the instance's heartbeat,
	// feeds L1's usage window, records the instance's in-flight counts, and returns L1's state.
	//
	// A report with Leaving set is applied as any other (the same figures, the same answer,
	// this instance counted in LiveInstances), and then removes the instance from the cluster's
	// live set, as if its heartbeat had expired: its heartbeat, its cluster in-flight count,
	// its in-flight count of each app the report carries (Apps), and its connection-slot
	// holdings of the cluster scope and of each app the report carries. So the next Report of
	// any other instance counts one live instance fewer and none of those counts, and a
	// LeaseSlots of another instance counts none of those holdings, at once rather than after
	// InstanceTTL. What it does not carry is left as it was (an app's in-flight count expires
	// InstanceTTL after the last report that carried the app; a holding of another scope
	// counts as an instance's that is not live: see LeaseSlots). Its report Seqs are kept, so a
	// leaving report sent again is applied once. A later report of the instance finds it not
	// live (Rejoined).
	Report(ctx context.Context, rep Report) (ClusterState, error)

	// SetEmergency sets (Active) or clears (not Active) the cluster's operator emergency,
	// fleet-wide. While it is set and not expired (Until zero, or the Store's now before
	// Until), every Report answers Emergency with EmergencySource "operator", its Reason and
	// Until, and the cluster's emergency ratios as factors, with or without L1 (Capacity 0).
	// An expired one is cleared by the next Report; one whose Until is not after the Store's
	// now when it is set is not set at all (the operator emergency is cleared). The automatic
	// emergency of L1 is kept and updated beside it, and reported again once it is gone.
	// Setting a new one replaces the old one.
	SetEmergency(ctx context.Context, cluster ClusterPolicy, e Emergency) error

	// Overrides returns the cluster's admin overrides (see Overrides).
	Overrides(ctx context.Context, cluster string) (Overrides, error)

	// SetOverride applies ch if the cluster's overrides are at ch.IfVersion, and returns the
	// new version; otherwise ErrVersionConflict and no change. The new version is
	// max(old + 1, the Store's now in µs), so versions stay unique across a loss of the
	// Store's data. Watchers are notified after the change. At most MaxOverrideEntries
	// entries are kept (ErrTooManyOverrides beyond).
	SetOverride(ctx context.Context, cluster string, ch OverrideChange) (uint64, error)

	// Watch calls notify (on another goroutine) once the watch is in place (it may connect in
	// the background; again after a reconnection) and after each change of the cluster's
	// overrides, until stop is called; possibly more often. It is best-effort: a change made
	// while the watch is not in place is seen by the next Report (ClusterState.ConfigVersion).
	Watch(cluster string, notify func()) (stop func())

	// LeaseSlots sets the instance's holding of one scope's connection slots (slots.go) to
	// max(min(Want, max(Limit - others, 0)), InUse), where others is Σ the holdings of the other instances
	// that are live (heartbeat no older than InstanceTTL; the caller counts as live); holdings
	// of instances that are not are dropped. A holding of 0 is removed.
	LeaseSlots(ctx context.Context, r SlotRequest) (SlotLease, error)

	// AppendAudit adds entry (see ValidateAuditEntry) to the cluster's audit log, fleet-wide;
	// the log keeps the newest MaxAuditEntries and never expires.
	AppendAudit(ctx context.Context, cluster string, entry []byte) error

	// Audit returns the newest min(limit, MaxAuditEntries) entries of the cluster's audit log,
	// newest first (none for limit <= 0).
	Audit(ctx context.Context, cluster string, limit int) ([][]byte, error)

	// Close releases the Store's resources.
	Close() error
}

// Priorities run from 0 (highest) to MaxPriority.
const MaxPriority = 3

// InstanceTTL is how long an instance counts as live after its last Report (its heartbeat).
// A silent instance drops out of LiveInstances, and its in-flight counts vanish with it, once
// its last heartbeat is more than InstanceTTL old: a few sync intervals, so one slow report
// does not make an instance look dead.
const InstanceTTL = 3 * time.Second

// AppPolicy is the L2 policy of one app.
type AppPolicy struct {
	Guaranteed     float64 // refill rate before L1's factor, tokens/s; > 0
	Burst          float64 // bucket size; >= Guaranteed
	Priority       int     // 0 (highest) … 3
	MaxBorrow      float64 // 0 = never borrows
	Max            float64 // elastic ceiling, tokens/s: 0 = Guaranteed (no elastic share)
	MaxConnections int64   // 0 = the connections default

	// Warmup (0 = off; whole µs, rounded up) is Guava's SmoothWarmingUp with cold factor 3.
	// An app whose last grant is Warmup or more ago (or that has none) is cold: its next lease
	// starts a warm-up at now. While t = now - start < Warmup, the total granted since the
	// start may not exceed allowance(t) = g/3·t + (2g/3)·t²/(2·Warmup) (t in seconds,
	// g = Guaranteed × the lease's factor: the integral of a rate ramping linearly from g/3 to
	// g), but never less than max(Need, 1): the first lease of a warm-up always gets its Need
	// if the bucket holds it, so a request costing more than the ramp allows is not starved.
	// A lease gets min(the normal grant, floor(allowance - granted so far)) if that covers
	// Need, otherwise nothing (Reason app_exhausted, RetryAfter when both the bucket and the
	// allowance cover Need; at most until the warm-up ends). Remaining is capped by the
	// allowance too. Refill, burst and Return are unchanged: returned tokens do not give
	// allowance back. The time of the last grant is kept whether or not Warmup is set, so
	// turning it on by a reload does not make active apps cold.
	Warmup time.Duration

	// Disabled: every request of the app is refused (ReasonAppDisabled) by the instances
	// before any token is taken; its policy, tokens and statistics are kept for when it is
	// enabled again. The Store never sees it: it is an admission rule of the gateways.
	Disabled bool
}

// WarmupUS is Warmup in whole microseconds, rounded up (0: no warm-up) and at most 2^53 (so
// that Lua's doubles hold it exactly), as both stores use it.
func (p AppPolicy) WarmupUS() int64 {
	us := int64(p.Warmup / time.Microsecond)
	if p.Warmup%time.Microsecond > 0 {
		us++
	}
	return min(max(us, 0), MaxAmount)
}

// ClusterPolicy is the L1 policy of one cluster. Capacity 0 means there is no L1.
type ClusterPolicy struct {
	ID                 string
	Capacity           float64 // tokens/s; 0 = no cluster limit
	ReservedRatio      float64 // default 0.1
	EmergencyThreshold float64 // default 0.95
	EmergencyRatios    [MaxPriority + 1]float64
	// Adaptive: the Store learns the capacity, starting from Capacity (docs/adaptive.md).
	Adaptive AdaptivePolicy
}

// Emergency is an operator emergency (Store.SetEmergency).
type Emergency struct {
	Active bool      // false clears the operator emergency
	Reason string    // stored as given
	Until  time.Time // when it ends by itself (truncated to whole µs); zero: until deactivated
}

// Emergency sources (ClusterState.EmergencySource).
const (
	EmergencySourceOperator = "operator"
	EmergencySourceAuto     = "auto"
)

// ValidateEmergency reports a malformed SetEmergency call.
func ValidateEmergency(c ClusterPolicy, e Emergency) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	if e.Active && !e.Until.IsZero() && (e.Until.UnixMicro() <= 0 || e.Until.UnixMicro() > MaxAmount) {
		return fmt.Errorf("cluster %q: emergency until %v: must be after the Unix epoch (and before 2255)", c.ID, e.Until)
	}
	return nil
}

// LeaseRequest asks the Store for tokens for one app.
type LeaseRequest struct {
	Cluster  ClusterPolicy
	App      string
	Policy   AppPolicy
	Factor   float64 // L1's current factor for the app's priority (1 without L1)
	Want     int64   // the lease target
	Need     int64   // the least that is useful (the cost of the request waiting on the lease); <= Want
	Instance string

	// Borrowing (Policy.MaxBorrow > 0, Cluster.Capacity > 0, not NoBorrow). L1 keeps a borrow
	// pool refilled at Unallocated tokens/s, holding at most one second's worth (Unallocated).
	// When the bucket cannot cover Need (floor(tokens) < Need after the refill, no warm-up
	// ramp in progress), the app borrows exactly the shortfall b = Need - floor(tokens) if
	// max_borrow - borrowed >= b (else ReasonBorrowLimitExceeded) and the pool holds b (else
	// ReasonClusterExhausted): the pool and L1's per-app record are debited in the cluster's
	// slot, then the app's bucket gets b and grants Need (exactly Need) from it, its debt grows
	// by ceil(b × BorrowRepay) and its borrowed by b. A failure between the two steps only
	// under-admits; L1's per-app record is set to the app's borrowed at the app's next borrow.
	// A refused borrow keeps the RetryAfter of the plain lease.
	//
	// Unallocated is (1 - ReservedRatio) × Capacity - Σ apps' Guaranteed (>= 0), computed by
	// the limiter from its config; NoBorrow is set in an emergency (no borrowing).
	Unallocated float64
	NoBorrow    bool

	// Stats are the app's statistics on this instance that travel with the lease, applied
	// before it, exactly once per Seq as Report applies an app's figures (see Report.Seq):
	// per-app statistics cost no call of their own while the app leases.
	Stats StatsBatch
	// StatsInterval is how long the caller's statistics of the app may wait for a call to
	// carry them (its stats_interval): the app's record outlives this call, idle, by at least
	// RecordIdle(StatsInterval), so that they reach the record they belong to.
	StatsInterval time.Duration
}

// StatsBatch is one app's admitted requests on one instance since its previous batch. Seq 0
// carries nothing; otherwise the Store adds Requests to the app's record at most once per Seq.
type StatsBatch struct {
	Seq      uint64
	Requests int64
}

// BorrowRepay is what a borrow of b adds to the app's debt per token: 1 + the interest (0.2).
// Debt is repaid by refill before anything reaches the bucket.
const BorrowRepay = 1.2

// BorrowState is one app's borrowing as a Store keeps it, for statistics and tests: its L2
// record's Debt and Borrowed (as stored, without a refill), and Recorded, L1's per-app borrow
// record (set to the app's borrowed at each borrow, then increased by the borrow).
type BorrowState struct {
	Debt     float64
	Borrowed float64
	Recorded float64
}

// BorrowingAllowed reports whether the request may borrow at all: Policy.MaxBorrow > 0,
// Cluster.Capacity > 0 (there is an L1) and not NoBorrow.
func (r LeaseRequest) BorrowingAllowed() bool {
	return r.Policy.MaxBorrow > 0 && r.Cluster.Capacity > 0 && !r.NoBorrow
}

// Lease is the Store's answer to a LeaseRequest.
type Lease struct {
	Granted    int64         // tokens moved from L2 to the caller
	Remaining  int64         // whole tokens left in L2 after the grant
	RetryAfter time.Duration // when Granted < Need: when Need tokens are expected to be there
	Reason     Reason        // when Granted < Need: why (ReasonAppExhausted, ReasonBorrowLimitExceeded, …)

	// PrevSeq is, when the request carried Stats (Seq != 0), the last Seq the Store had applied
	// for the app and this instance before this call (see ClusterState.PrevSeq).
	PrevSeq uint64

	// The app's L2 borrowing after this lease (its refill, which repays debt first, and any
	// borrow): the record's Debt and Borrowed, as BorrowState shows them.
	Debt     float64
	Borrowed float64
}

// Return gives tokens back to one app's L2 bucket.
type Return struct {
	Cluster  ClusterPolicy
	App      string
	Policy   AppPolicy
	Tokens   int64
	Instance string
	// Stats are the app's statistics that travel with the return, applied exactly once per
	// Seq as a lease's (LeaseRequest.Stats): an app that stopped needs no flush of its own. A
	// return of no tokens is a no-op and carries none.
	Stats         StatsBatch
	StatsInterval time.Duration // as LeaseRequest.StatsInterval
}

// AppReport is one app's statistics for one report interval on one instance.
type AppReport struct {
	App      string
	Requests int64  // admitted requests
	Cost     int64  // admitted cost (L1's usage window, like Report.Cost)
	InFlight int64  // requests in flight on this instance now (connlimit)
	Seq      uint64 // numbers Requests like Report.Seq numbers the cost, per app (0: unnumbered)
}

// Report is one instance's periodic report for one cluster.
type Report struct {
	Cluster  ClusterPolicy
	Instance string
	Apps     []AppReport
	InFlight int64 // cluster-wide requests in flight on this instance now
	Cost     int64 // admitted cost for L1's usage window, besides the apps' Cost
	// CostSpan is how long the cost (Cost and the apps' Cost) took to be admitted, ending at
	// the report: L1 spreads it evenly over that span (0: all at the report's time), so that
	// reports arriving unevenly do not make the usage jump. At most MaxCostSpan counts.
	CostSpan time.Duration

	// Seq numbers the instance's reports to the cluster, strictly increasing (at most 2^53);
	// 0 is an unnumbered report, always applied. It makes reports idempotent: a Store applies
	// the cost (Cost and the apps' Cost) of a Seq at most once; an app's Requests are numbered
	// the same way by AppReport.Seq, per app (and shared with LeaseRequest.Stats). A report
	// whose Seq is not above the last one the Store applied for the instance (per cluster for
	// the usage window, per app for the statistics) still refreshes the heartbeat and the
	// in-flight counts and returns L1's state, but adds nothing. A sender whose report failed does not know whether it was
	// applied (a timeout may come after the Store ran it), so it sends the same figures with
	// the same Seq again, and new figures with a later Seq. A Store remembers an instance's
	// last Seq for ReportSeqTTL after the instance last sent one (per app: also no longer than
	// the app's record lives, at least RecordIdle(StatsInterval) after the report).
	Seq uint64
	// StatsInterval is as LeaseRequest.StatsInterval, for the records of the apps in Apps.
	StatsInterval time.Duration

	// Signals are the backend's answers to this instance's admitted requests since its
	// previous report (Cluster.Adaptive on): applied with Cost, once per Seq, into the
	// controller's period.
	Signals Signals

	// Leaving says this is the instance's last report to the cluster (its limiter is closing):
	// after applying it the Store removes the instance from the live set (see Store.Report).
	// The Store drops only the per-app in-flight counts and slot holdings of the apps in Apps:
	// a sender carries, as in every report, each app whose in-flight count it reported non-zero
	// before (with a zero count if it has none now), and gives its slot holdings back itself
	// before (LeaseSlots with Want 0), so the leaving report drops what a give-back that
	// failed left in the cluster scope and in the scopes of the apps it carries.
	Leaving bool
}

// MinRecordIdle is the least time a Store keeps an app's record after the last call that wrote
// it. It keeps it longer for a large burst / guaranteed (2 × that, so that a record is dropped
// only once its bucket is full again), a warm-up, and a caller's StatsInterval (RecordIdle).
const MinRecordIdle = 60 * time.Second

// MaxRecordIdle caps an app record's idle lifetime.
const MaxRecordIdle = 30 * 24 * time.Hour

// RecordIdle is the least time an app's record outlives a call, idle, when the caller's
// statistics may wait statsInterval for a call to carry them. A flush of statistics that waited
// the interval goes out with the caller's first report after it: the grace covers that report's
// interval and latency. A record that expired first would be made anew by the flush, with a
// count of that flush alone: with a lifetime equal to the interval, the final statistics of an
// app that stops at its quota would race the record's expiry and lose its count.
func RecordIdle(statsInterval time.Duration) time.Duration {
	return min(max(MinRecordIdle, statsInterval+statsGrace), MaxRecordIdle)
}

// statsGrace is what an app's record outlives a caller's StatsInterval by (RecordIdle).
const statsGrace = 30 * time.Second

// MaxCostSpan bounds Report.CostSpan: cost spread further back than L1's one-second window would
// not count anyway.
const MaxCostSpan = 2 * time.Second

// CostSpanMicros is CostSpan as the Stores apply it: in µs, within [0, MaxCostSpan].
func (r Report) CostSpanMicros() int64 {
	return min(max(r.CostSpan, 0), MaxCostSpan).Microseconds()
}

// ReportSeqTTL is how long a Store remembers an instance's last report Seq (see Report.Seq):
// a report sent again after this long may be counted twice.
const ReportSeqTTL = 10 * time.Minute

// ClusterState is L1's state as the Store sees it, returned by Report.
type ClusterState struct {
	Usage float64 // u: fleet-wide admitted cost per second / Capacity (0 without L1)
	// Capacity is L1's capacity in force (0 without L1): the learned one with
	// Cluster.Adaptive, else the configured one (an override's, when the caller's policy
	// carries one). CapacitySource says which (CapacityConfig, CapacityAdaptive); the caller
	// knows an override.
	Capacity        float64
	CapacitySource  string
	Adaptive        AdaptiveState            // the controller's signals and last change (Cluster.Adaptive on)
	Factors         [MaxPriority + 1]float64 // refill factor per priority
	Emergency       bool
	EmergencySource string    // "operator" (SetEmergency; wins over L1's own), "auto" (L1's usage), "" outside
	EmergencyReason string    // the operator's reason; "auto" for L1's own; "" outside an emergency
	EmergencyUntil  time.Time // the operator emergency's end; zero: until deactivated / L1 leaves it
	LiveInstances   int       // instances whose heartbeat is fresh, this one included (>= 1)
	// Rejoined: this instance was not live in the Store before this report (its first report,
	// a heartbeat older than InstanceTTL, or a Store that lost its data). What the Store held
	// for it is gone: its connection slots must be leased again.
	Rejoined bool

	// In-flight counts last reported by the other live instances (not this one).
	RemoteInFlight        map[string]int64 // per app
	RemoteClusterInFlight int64

	// PrevSeq is, per app of a numbered report, the last Seq the Store had applied for this
	// instance before this report (0: none). A Store that lost writes it had acknowledged (a
	// failover to a replica that had not received them) answers with a Seq below batches the
	// sender saw acknowledged: the sender then sends those figures again.
	PrevSeq map[string]uint64

	// ConfigVersion is the cluster's Overrides.Version: an instance whose overrides are at
	// another version loads them again (a lost Watch notification, a Store that was away).
	ConfigVersion uint64
}

// PermanentError is a Store error that retrying cannot fix: the Store refused this instance's
// credentials, permissions or certificate (a configuration error, not a fault). The limiter
// treats it like any Store error (fail_open, rescue limits, probes), but logs it at ERROR
// with its remedy. A Store marks such errors by implementing this interface anywhere in the
// error's chain.
type PermanentError interface {
	error
	// Permanent reports whether the error is permanent.
	Permanent() bool
	// Remedy says what the operator has to change.
	Remedy() string
}

// AsPermanent returns the permanent error in err's chain, if there is one.
func AsPermanent(err error) (PermanentError, bool) {
	var p PermanentError
	if errors.As(err, &p) && p.Permanent() {
		return p, true
	}
	return nil, false
}
