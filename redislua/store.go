package redislua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/adaptive"
	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Store is the Redis implementation of store.Store. Every read-modify-write is one Lua script
// run with EVALSHA (EVAL when the server does not know the script); time is Redis TIME.
type Store struct {
	client  redis.UniversalClient
	keys    keys
	clock   clock.Clock  // nil: Redis TIME
	release func() error // set by Open: gives the shared client back to the pool

	watchRefused func(store.PermanentError, bool) // see OnWatchRefused

	// clusterNode is set once a call met a Redis Cluster node through this standalone client
	// (classify): every report fails with it from then on (see Report).
	clusterNode atomic.Pointer[PermanentError]
}

var _ store.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the scripts use clk instead of Redis TIME. It exists for tests that drive
// the Redis store and the memory store with one manual clock.
func WithClock(clk clock.Clock) Option {
	return func(s *Store) { s.clock = clk }
}

// New returns a Store using client and keys under prefix (DefaultPrefix if empty). Close does
// not close a client passed to New.
func New(client redis.UniversalClient, prefix string, opts ...Option) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	s := &Store{client: client, keys: keys{prefix: prefix}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Client is the Redis client the Store uses.
func (s *Store) Client() redis.UniversalClient { return s.client }

// Prefix is the key prefix.
func (s *Store) Prefix() string { return s.keys.prefix }

// nowArg is the time argument of every script: "" lets the script read Redis TIME.
func (s *Store) nowArg() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
}

// keepMillis is the least idle lifetime (ms) of the app records a call writes, for a caller
// whose statistics wait up to statsInterval (store.RecordIdle).
func keepMillis(statsInterval time.Duration) int64 {
	return store.RecordIdle(statsInterval).Milliseconds()
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Lease implements store.Store.
func (s *Store) Lease(ctx context.Context, req store.LeaseRequest) (store.Lease, error) {
	if err := req.Validate(); err != nil {
		return store.Lease{}, fmt.Errorf("redislua: %w", err)
	}
	vals, err := leaseScript.Run(ctx, s.client, []string{s.keys.l2(req.Cluster.ID, req.App)},
		s.nowArg(), fmtFloat(req.Policy.Guaranteed), fmtFloat(req.Policy.Burst), fmtFloat(req.Factor),
		req.Want, req.Need, req.Policy.WarmupUS(), req.Instance, req.Stats.Seq, req.Stats.Requests,
		store.ReportSeqTTL.Microseconds(), keepMillis(req.StatsInterval)).Slice()
	if err != nil {
		s.failed()
		return store.Lease{}, fmt.Errorf("redislua: lease: %w", s.classify(err))
	}
	if len(vals) != 8 {
		return store.Lease{}, fmt.Errorf("redislua: lease: unexpected reply %v", vals)
	}
	var l store.Lease
	l.Granted, _ = vals[0].(int64)
	l.Remaining, _ = vals[1].(int64)
	retry, err := parseFloat(vals[2])
	if err != nil {
		return store.Lease{}, fmt.Errorf("redislua: lease: %w", s.classify(err))
	}
	l.RetryAfter = time.Duration(retry) * time.Microsecond
	if name, _ := vals[3].(string); name != "" {
		r, ok := store.ParseReason(name)
		if !ok {
			return store.Lease{}, fmt.Errorf("redislua: lease: unknown reason %q", name)
		}
		l.Reason = r
	}
	if l.Borrowed, err = parseFloat(vals[5]); err != nil {
		return store.Lease{}, fmt.Errorf("redislua: lease: %w", err)
	}
	if l.Debt, err = parseFloat(vals[6]); err != nil {
		return store.Lease{}, fmt.Errorf("redislua: lease: %w", err)
	}
	prev, err := parseFloat(vals[7])
	if err != nil {
		return store.Lease{}, fmt.Errorf("redislua: lease: %w", err)
	}
	l.PrevSeq = uint64(prev)
	short, _ := vals[4].(int64)
	if short <= 0 || !req.BorrowingAllowed() {
		return l, nil
	}
	l, err = s.borrow(ctx, req, l, short, l.Borrowed)
	l.PrevSeq = uint64(prev)
	return l, err
}

// borrow runs the two steps of a borrow (store.LeaseRequest.Unallocated), each in its own
// hash slot: borrow_pool.lua debits L1's pool (cluster slot), then borrow_credit.lua credits the
// app (app slot). A failure between them can only under-admit: the pool lost tokens that nobody
// got, and L1's per-app record, which counts them, is set to the app's borrowed by its next
// borrow. l is the plain lease's answer (refused), kept when nothing is borrowed.
func (s *Store) borrow(ctx context.Context, req store.LeaseRequest, l store.Lease, short int64, borrowed float64) (store.Lease, error) {
	vals, err := borrowPoolScript.Run(ctx, s.client, []string{s.keys.l1(req.Cluster.ID)},
		s.nowArg(), req.App, fmtFloat(borrowed), fmtFloat(req.Policy.MaxBorrow), fmtFloat(req.Unallocated), short).Slice()
	if err != nil {
		s.failed()
		return store.Lease{}, fmt.Errorf("redislua: borrow: %w", s.classify(err))
	}
	if len(vals) != 2 {
		return store.Lease{}, fmt.Errorf("redislua: borrow: unexpected reply %v", vals)
	}
	got, _ := vals[0].(int64)
	if got <= 0 {
		name, _ := vals[1].(string)
		r, ok := store.ParseReason(name)
		if !ok || r == store.ReasonNone {
			return store.Lease{}, fmt.Errorf("redislua: borrow: unexpected reason %q", name)
		}
		l.Reason = r
		return l, nil
	}
	vals, err = borrowCreditScript.Run(ctx, s.client, []string{s.keys.l2(req.Cluster.ID, req.App)},
		s.nowArg(), fmtFloat(req.Policy.Guaranteed), fmtFloat(req.Policy.Burst), req.Need, got,
		req.Policy.WarmupUS(), fmtFloat(store.BorrowRepay), keepMillis(req.StatsInterval)).Slice()
	if err != nil {
		s.failed()
		return store.Lease{}, fmt.Errorf("redislua: borrow credit: %w", s.classify(err))
	}
	if len(vals) != 4 {
		return store.Lease{}, fmt.Errorf("redislua: borrow credit: unexpected reply %v", vals)
	}
	granted, _ := vals[0].(int64)
	remaining, _ := vals[1].(int64)
	out := store.Lease{Granted: granted, Remaining: remaining}
	if out.Borrowed, err = parseFloat(vals[2]); err != nil {
		return store.Lease{}, fmt.Errorf("redislua: borrow credit: %w", err)
	}
	if out.Debt, err = parseFloat(vals[3]); err != nil {
		return store.Lease{}, fmt.Errorf("redislua: borrow credit: %w", err)
	}
	if granted == 0 {
		// Another lease took the tokens between the steps: the borrowed ones stay in the bucket.
		out.RetryAfter, out.Reason = l.RetryAfter, store.ReasonAppExhausted
	}
	return out, nil
}

// BorrowState returns the app's borrowing as stored (see store.BorrowState); zero without records.
func (s *Store) BorrowState(ctx context.Context, cluster, app string) (store.BorrowState, error) {
	v, err := s.client.HMGet(ctx, s.keys.l2(cluster, app), "debt", "borrowed").Result()
	if err != nil {
		return store.BorrowState{}, fmt.Errorf("redislua: borrow state of app %q: %w", app, err)
	}
	r, err := s.client.HGet(ctx, s.keys.l1(cluster), "borrowed:"+app).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return store.BorrowState{}, fmt.Errorf("redislua: borrow state of app %q: %w", app, err)
	}
	var st store.BorrowState
	for i, p := range []*float64{&st.Debt, &st.Borrowed} {
		if x, ok := v[i].(string); ok {
			if *p, err = strconv.ParseFloat(x, 64); err != nil {
				return store.BorrowState{}, err
			}
		}
	}
	if r != "" {
		if st.Recorded, err = strconv.ParseFloat(r, 64); err != nil {
			return store.BorrowState{}, err
		}
	}
	return st, nil
}

// Return implements store.Store.
func (s *Store) Return(ctx context.Context, ret store.Return) error {
	if err := ret.Validate(); err != nil {
		return fmt.Errorf("redislua: %w", err)
	}
	if ret.Tokens <= 0 {
		return nil // a no-op: no write
	}
	err := returnScript.Run(ctx, s.client, []string{s.keys.l2(ret.Cluster.ID, ret.App)},
		s.nowArg(), fmtFloat(ret.Policy.Guaranteed), fmtFloat(ret.Policy.Burst), ret.Tokens, ret.Policy.WarmupUS(),
		ret.Instance, ret.Stats.Seq, ret.Stats.Requests, store.ReportSeqTTL.Microseconds(),
		keepMillis(ret.StatsInterval)).Err()
	if err != nil {
		s.failed()
		return fmt.Errorf("redislua: return: %w", s.classify(err))
	}
	return nil
}

// Report implements store.Store. The cluster part and one script per app (each in its own
// hash slot) go out in one pipeline: one round trip per report.
func (s *Store) Report(ctx context.Context, rep store.Report) (store.ClusterState, error) {
	if err := rep.Validate(); err != nil {
		return store.ClusterState{}, fmt.Errorf("redislua: %w", err)
	}
	if p := s.clusterNode.Load(); p != nil {
		// The report is the limiter's probe: succeeding on the node that serves the cluster's
		// slot, it ended fail_open every few seconds while every app of another slot still
		// failed, and the log alternated the ERROR and "recovered". The configuration stays
		// wrong until a reload opens another Store.
		return store.ClusterState{}, fmt.Errorf("redislua: report: %w", p)
	}
	now := s.nowArg()
	ttl := store.InstanceTTL.Microseconds()
	seqTTL := store.ReportSeqTTL.Microseconds()
	keep := keepMillis(rep.StatsInterval)
	c := rep.Cluster
	cost := rep.Cost
	for _, a := range rep.Apps {
		cost += a.Cost
	}

	leaving := 0
	clusterKeys := []string{s.keys.l1(c.ID), s.keys.nodes(c.ID), s.keys.clusterConn(c.ID), s.keys.cfg(c.ID)}
	if rep.Leaving {
		// The holdings a leaving instance drops: the cluster scope's and its apps' (Report.Leaving).
		leaving = 1
		clusterKeys = append(clusterKeys, s.keys.slots(c.ID, ""))
		for _, a := range rep.Apps {
			clusterKeys = append(clusterKeys, s.keys.slots(c.ID, a.App))
		}
	}
	calls := make([]scriptCall, 0, 1+len(rep.Apps))
	args := make([]any, 0, 37)
	args = append(args,
		now, rep.Instance, rep.InFlight, ttl, fmtFloat(c.Capacity), fmtFloat(c.EmergencyThreshold),
		fmtFloat(c.EmergencyRatios[0]), fmtFloat(c.EmergencyRatios[1]), fmtFloat(c.EmergencyRatios[2]),
		fmtFloat(c.EmergencyRatios[3]), cost, rep.Seq, seqTTL,
		rep.CostSpanMicros(), leaving,
		fmtFloat(c.Adaptive.Min), fmtFloat(c.Adaptive.Max),
		rep.Signals.Answers, rep.Signals.Throttles, rep.Signals.Slow)
	for _, n := range rep.Signals.Latency {
		args = append(args, n)
	}
	args = append(args, c.Adaptive.LatencyTarget.Nanoseconds())
	calls = append(calls, scriptCall{script: reportClusterScript, keys: clusterKeys, args: args})
	for _, a := range rep.Apps {
		calls = append(calls, scriptCall{
			script: reportAppScript,
			keys:   []string{s.keys.l2(c.ID, a.App), s.keys.appConn(c.ID, a.App)},
			args:   []any{now, rep.Instance, a.Requests, a.InFlight, ttl, a.Seq, seqTTL, keep, leaving},
		})
	}
	cmds, err := s.runPipeline(ctx, calls)
	if err != nil {
		s.failed()
		return store.ClusterState{}, fmt.Errorf("redislua: report: %w", s.classify(err))
	}

	st, err := parseClusterState(cmds[0])
	if err != nil {
		return store.ClusterState{}, fmt.Errorf("redislua: report: %w", s.classify(err))
	}
	for i, a := range rep.Apps {
		vals, err := cmds[i+1].Slice()
		if err == nil && len(vals) != 2 {
			err = fmt.Errorf("unexpected reply %v", vals)
		}
		var remote, prev float64
		if err == nil {
			remote, err = parseFloat(vals[0])
		}
		if err == nil {
			prev, err = parseFloat(vals[1])
		}
		if err != nil {
			return store.ClusterState{}, fmt.Errorf("redislua: report: app %q: %w", a.App, err)
		}
		if a.Seq != 0 {
			if st.PrevSeq == nil {
				st.PrevSeq = make(map[string]uint64, len(rep.Apps))
			}
			st.PrevSeq[a.App] = uint64(prev)
		}
		if remote != 0 {
			if st.RemoteInFlight == nil {
				st.RemoteInFlight = make(map[string]int64, len(rep.Apps))
			}
			st.RemoteInFlight[a.App] = int64(remote)
		}
	}
	return st, nil
}

// SetEmergency implements store.Store: the operator emergency lives in the cluster's l1 hash
// (fields op_active, op_reason, op_until_us), written by set_emergency.lua.
func (s *Store) SetEmergency(ctx context.Context, c store.ClusterPolicy, e store.Emergency) error {
	if err := store.ValidateEmergency(c, e); err != nil {
		return fmt.Errorf("redislua: %w", err)
	}
	var active, until int64
	if e.Active {
		active = 1
		if !e.Until.IsZero() {
			until = e.Until.UnixMicro()
		}
	}
	err := setEmergencyScript.Run(ctx, s.client, []string{s.keys.l1(c.ID)}, s.nowArg(), active, e.Reason, until).Err()
	if err != nil {
		s.failed()
		return fmt.Errorf("redislua: set emergency: %w", s.classify(err))
	}
	return nil
}

// failed is called after a call that failed. On a Redis Cluster the client's slot map may be
// what failed: loaded while the cluster was still forming, or naming a master that died and
// whose replica took over. go-redis reloads it on MOVED, but not on CLUSTERDOWN, a refused
// connection or a timeout, so a stale map could keep every call failing (the limiter stuck in
// fail_open while the cluster is healthy). A reload is asynchronous and go-redis coalesces
// them (at most one per 200 ms), so calling it after every failure is cheap.
func (s *Store) failed() {
	if c, ok := s.client.(*redis.ClusterClient); ok {
		c.ReloadState(context.Background())
	}
}

// AppRequests returns the requests reported for the app (statistics: the "requests" field of
// its L2 record; 0 if it has none).
func (s *Store) AppRequests(ctx context.Context, cluster, app string) (int64, error) {
	n, err := s.client.HGet(ctx, s.keys.l2(cluster, app), "requests").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redislua: requests of app %q: %w", app, err)
	}
	return n, nil
}

func parseClusterState(cmd *redis.Cmd) (store.ClusterState, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return store.ClusterState{}, err
	}
	if len(vals) != 17 {
		return store.ClusterState{}, fmt.Errorf("unexpected reply %v", vals)
	}
	var st store.ClusterState
	floats := make([]float64, 5)
	for i := range floats {
		if floats[i], err = parseFloat(vals[i]); err != nil {
			return store.ClusterState{}, err
		}
	}
	st.Usage = floats[0]
	copy(st.Factors[:], floats[1:])
	em, _ := vals[5].(int64)
	st.Emergency = em == 1
	st.EmergencyReason, _ = vals[6].(string)
	live, _ := vals[7].(int64)
	st.LiveInstances = int(max(live, 1))
	remote, err := parseFloat(vals[8])
	if err != nil {
		return store.ClusterState{}, err
	}
	st.RemoteClusterInFlight = int64(remote)
	st.EmergencySource, _ = vals[9].(string)
	until, err := parseFloat(vals[10])
	if err != nil {
		return store.ClusterState{}, err
	}
	if until != 0 {
		st.EmergencyUntil = time.UnixMicro(int64(until))
	}
	version, err := parseFloat(vals[11])
	if err != nil {
		return store.ClusterState{}, err
	}
	st.ConfigVersion = uint64(version)
	rejoined, _ := vals[12].(int64)
	st.Rejoined = rejoined == 1
	if st.Capacity, err = parseFloat(vals[13]); err != nil {
		return store.ClusterState{}, err
	}
	st.CapacitySource, _ = vals[14].(string)
	if st.CapacitySource == "" {
		st.Capacity = 0 // no L1
	}
	lp, _ := vals[15].(string)
	chg, _ := vals[16].(string)
	if st.CapacitySource == store.CapacityAdaptive {
		if st.Adaptive, err = parseAdaptive(lp, chg); err != nil {
			return store.ClusterState{}, err
		}
	}
	return st, nil
}

// parseAdaptive reads the controller's last period ('answers throttles slow cost lat0..lat15')
// and last change ('at_us from to cause'), each ” when there is none yet.
func parseAdaptive(lp, chg string) (store.AdaptiveState, error) {
	var a store.AdaptiveState
	if f := strings.Fields(lp); len(f) > 0 {
		if len(f) != 4+adaptive.SketchBuckets {
			return a, fmt.Errorf("unexpected last period %q", lp)
		}
		n := make([]float64, len(f))
		for i, x := range f {
			v, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return a, fmt.Errorf("last period %q: %w", lp, err)
			}
			n[i] = v
		}
		a.Period.Answers, a.Period.Throttles, a.Period.Slow, a.PeriodCost = int64(n[0]), int64(n[1]), int64(n[2]), n[3]
		for i := range a.Period.Latency {
			a.Period.Latency[i] = int64(n[4+i])
		}
	}
	if f := strings.Fields(chg); len(f) > 0 {
		if len(f) != 4 {
			return a, fmt.Errorf("unexpected last change %q", chg)
		}
		var v [3]float64
		for i := range v {
			x, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return a, fmt.Errorf("last change %q: %w", chg, err)
			}
			v[i] = x
		}
		a.LastChange = store.CapacityChange{At: time.UnixMicro(int64(v[0])), From: v[1], To: v[2], Cause: f[3]}
	}
	return a, nil
}

// scriptCall is one script invocation of a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runPipeline runs the calls with EVALSHA in one pipeline. Calls that failed with NOSCRIPT (a
// restarted or flushed server) did not run; they are sent again with EVAL, which loads them.
func (s *Store) runPipeline(ctx context.Context, calls []scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := s.client.Pipeline()
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	execPipeline(ctx, pipe, cmds)

	var retry []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		pipe = s.client.Pipeline()
		for _, i := range retry {
			c := calls[i]
			cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
		}
		execPipeline(ctx, pipe, cmds)
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// execPipeline runs pipe and gives its error to the commands of cmds that got no reply:
// go-redis does not stamp them with an error Redis returned while the connection was set up
// (WRONGPASS, NOAUTH, NOPERM of the handshake), which would leave them empty and the error
// unnamed. A command that ran has a value or an error (redis.Nil for a nil reply), so none is
// stamped twice and no script that ran is run again.
func execPipeline(ctx context.Context, pipe redis.Pipeliner, cmds []*redis.Cmd) {
	_, err := pipe.Exec(ctx)
	if err == nil {
		return
	}
	for _, cmd := range cmds {
		if cmd.Err() == nil && cmd.Val() == nil {
			cmd.SetErr(err)
		}
	}
}

// Close implements store.Store: a Store from Open gives its client back to the shared pool;
// a Store from New leaves the client to its owner.
func (s *Store) Close() error {
	if s.release == nil {
		return nil
	}
	return s.release() // runs once however often Close is called
}

func parseFloat(v any) (float64, error) {
	switch x := v.(type) {
	case string:
		return strconv.ParseFloat(x, 64)
	case int64:
		return float64(x), nil
	}
	return 0, fmt.Errorf("unexpected value %v (%T)", v, v)
}
