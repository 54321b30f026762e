package tierbucket

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// State that must outlive a config reload — local buckets, connection counters,
// the sync loop — lives in clusters, a caddy.UsagePool keyed by cluster id and Store identity,
// like reverse_proxy keeps its upstream hosts. A reload provisions the new handlers before the
// old ones are cleaned up, so the state's reference count never drops to zero in between and
// the new policy is applied to the live buckets with Update: tokens and in-flight counts stay.
//
// Config generations. Every config load has its own caddy.Context, and with it its own metrics
// registry (caddy.NewContext makes one per load); that registry pointer names the generation.
// Two things are tracked per generation:
//
//   - definitions: the fingerprint of each cluster id's definition. A second handler of the
//     same generation that defines the same cluster id differently is a provisioning error
//     ("conflicting definitions of one cluster id in one config"). Handlers of
//     different generations may differ: that is a reload.
//   - clusterState.gens: the policies applied to a state, in provisioning order. When the newest
//     generation goes away while an older one still holds the state — a reload that failed after
//     this handler was provisioned, so Caddy keeps running the old config — the older policy
//     is applied again, so a failed reload leaves the running policy as it was.
var (
	clusters = caddy.NewUsagePool()

	definitions = struct {
		sync.Mutex
		m map[defKey]*defEntry
	}{m: map[defKey]*defEntry{}}
)

type defKey struct {
	gen     any // the generation's metrics registry
	cluster string
}

type defEntry struct {
	fingerprint string
	refs        int
}

// poolKey identifies one shared state: a cluster id on one Store, reached with one set of
// credentials and TLS settings.
type poolKey struct {
	cluster string
	store   string // "memory" or the Redis identity
	conn    string // the digest of the Redis credentials and TLS settings (redisConnDigest)
}

// definition is everything that makes up a cluster's shared state in one handler's config.
type definition struct {
	key         poolKey
	fingerprint string
	lim         limiter.Config
	conns       connlimit.Config
	redis       *redislua.Config // nil: the memory store
}

// definition validates the shared-state fields of h and returns what they define.
func (h *Handler) definition() (definition, error) {
	var def definition
	lc, err := h.limiterConfig()
	if err != nil {
		return def, err
	}
	def.conns = h.Connections.limits()
	if err := def.conns.Validate(); err != nil {
		return def, err
	}
	def.key = poolKey{cluster: lc.Cluster.ID, store: "memory"}
	if h.Redis != nil {
		rc, err := h.Redis.resolve(h.ctxPtr())
		if err != nil {
			return def, err
		}
		def.redis = &rc
		def.key.store = redisIdentity(rc)
		def.key.conn = redisConnDigest(rc, h.Redis.TrustPoolRaw)
		lc.StoreTimeout = rc.Timeout
	}
	def.lim = lc

	// The fingerprint is the configuration as written (not the resolved secrets), so it is
	// stable and never carries a resolved password: the handler's fields less the per-handler
	// ones (json skips the unexported runtime fields).
	shared := *h
	shared.Cluster = lc.Cluster.ID
	shared.Key, shared.Cost, shared.MaxWait, shared.Headers, shared.Shadow, shared.Errors = "", nil, 0, "", false, false
	shared.Format = ""
	fp, err := json.Marshal(shared)
	if err != nil {
		return def, fmt.Errorf("cluster %q: %v", lc.Cluster.ID, err)
	}
	def.fingerprint = string(fp)
	return def, nil
}

// clusterState is one cluster's shared state: the limiter, the connection counter, the Store.
type clusterState struct {
	key   poolKey
	lim   *limiter.Limiter
	conns *connlimit.Counter
	store store.Store
	hist  *sampler // the per-second history (admin GET /rate_limit/history)

	probed atomic.Pointer[probeState] // the start-up probe of a Redis Store (nil: none)

	// Decisions taken before there is an App to record them on (metrics, label "*").
	invalidIDs     atomic.Int64
	unknownRejects atomic.Int64

	mu   sync.Mutex
	gens []*genConfig // the generations holding this state, oldest first; the last one is applied
}

type genConfig struct {
	gen   any
	lim   limiter.Config
	conns connlimit.Config
	refs  int
}

func newClusterState(def definition) (*clusterState, error) {
	s := &clusterState{key: def.key}
	lc := def.lim
	if def.redis != nil {
		redislua.SetLogger(caddy.Log().Named("rate_limit.redis"))
		if def.redis.TLSInsecureSkipVerify && lc.Logger != nil {
			lc.Logger.Warn("rate_limit: tls_insecure_skip_verify: the Redis server's certificate is not verified; "+
				"anyone on the path to Redis can read and change the rate limits (use tls_trust_pool instead)",
				zap.String("cluster", def.key.cluster))
		}
		st, err := redislua.Open(*def.redis)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: redis: %v", def.key.cluster, err)
		}
		if err := validateStore(st, def.key.cluster); err != nil {
			_ = st.Close()
			return nil, err
		}
		logger := lc.Logger
		st.OnWatchRefused(func(p store.PermanentError, first bool) { s.watchRefused(logger, p, first) })
		s.store = st
		lc.KnownInstances, lc.OnLiveInstances = liveInstancesFile(def.key, lc.Logger)
	} else {
		s.store = memstore.New(nil)
	}
	s.conns = connlimit.New(def.conns, nil)
	lc.Connections = s.conns
	lim, err := limiter.New(lc, newTimedStore(s.store, def.key.cluster), nil)
	if err != nil {
		s.conns.Close()
		_ = s.store.Close()
		return nil, fmt.Errorf("cluster %q: %v", def.key.cluster, err)
	}
	s.lim = lim
	s.conns.UseSlots(lim) // fleet-wide in-flight limits through leased slots
	s.conns.KeepApps(lim.Configured)
	if !validating() {
		lim.SyncNow() // the fleet's overrides and emergency before the first requests, not 100 ms later
	}
	if rs, ok := s.store.(*redislua.Store); ok {
		s.probe(rs, lc.Logger)
	}
	s.hist = startSampler(s)
	return s, nil
}

// Destruct is called by the pool when the last handler using the state is cleaned up: the
// limiter returns its unspent tokens to L2 and sends its last statistics.
func (s *clusterState) Destruct() error {
	if p := s.probed.Load(); p != nil {
		p.stop()
	}
	s.hist.close()
	s.conns.GiveBackSlots()
	errs := []error{s.lim.Close()}
	s.conns.Close()
	errs = append(errs, s.store.Close())
	forgetStoreMetrics(s.key.cluster)
	return errors.Join(errs...)
}

// forgetStoreMetrics removes the Store latency and error series of a cluster id that no live
// state uses any more (a reload renamed or removed it), so that they do not stay for the life
// of the process. A state of the same id on another Store (a reload that switches stores)
// keeps them: it is created before the old one is closed.
func forgetStoreMetrics(cluster string) {
	for _, s := range liveClusters() {
		if s.key.cluster == cluster {
			return
		}
	}
	storeLatency.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	storeErrors.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}

// join records one more handler of generation gen; the first of a new generation applies its
// policy to the live state (unless the state was just built from it).
func (s *clusterState) join(gen any, def definition, fresh bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.gens {
		if g.gen == gen {
			g.refs++
			return nil
		}
	}
	lc := def.lim
	lc.Connections = s.conns
	if !fresh {
		if err := s.lim.Update(lc); err != nil {
			return fmt.Errorf("cluster %q: %v", def.key.cluster, err)
		}
		s.conns.Update(def.conns)
		if n := len(s.gens); n > 0 {
			prev := s.gens[n-1]
			logPolicyChange(lc.Logger, prev.lim, lc, prev.conns, def.conns)
		}
	}
	s.gens = append(s.gens, &genConfig{gen: gen, lim: lc, conns: def.conns, refs: 1})
	return nil
}

// leave drops one handler of generation gen. When the newest generation leaves while older
// ones remain (a failed reload), the newest remaining policy is applied again.
func (s *clusterState) leave(gen any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, g := range s.gens {
		if g.gen != gen {
			continue
		}
		g.refs--
		if g.refs > 0 {
			return
		}
		newest := i == len(s.gens)-1
		s.gens = append(s.gens[:i], s.gens[i+1:]...)
		if newest && len(s.gens) > 0 {
			prev := s.gens[len(s.gens)-1]
			_ = s.lim.Update(prev.lim) // it was valid when it was applied
			s.conns.Update(prev.conns)
		}
		return
	}
}

// acquireCluster joins the shared state that def describes for the generation of ctx, creating
// it if needed. The returned func gives the reference back (exactly once).
func acquireCluster(ctx caddy.Context, def definition, logger *zap.Logger) (*clusterState, func(), error) {
	gen := any(ctx.GetMetricsRegistry())
	dk := defKey{gen: gen, cluster: def.key.cluster}
	def.lim.Logger = logger

	definitions.Lock()
	e := definitions.m[dk]
	if e != nil && e.fingerprint != def.fingerprint {
		definitions.Unlock()
		return nil, nil, fmt.Errorf("cluster %q: conflicting definitions in one config: every "+
			"rate_limit handler with this cluster id must define it identically (use a snippet "+
			"and import it), or use another cluster id", def.key.cluster)
	}
	if e == nil {
		e = &defEntry{fingerprint: def.fingerprint}
		definitions.m[dk] = e
	}
	e.refs++
	definitions.Unlock()
	dropDef := func() {
		definitions.Lock()
		if e.refs--; e.refs == 0 {
			delete(definitions.m, dk)
		}
		definitions.Unlock()
	}

	v, loaded, err := clusters.LoadOrNew(def.key, func() (caddy.Destructor, error) {
		return newClusterState(def)
	})
	if err != nil {
		dropDef()
		return nil, nil, err
	}
	s := v.(*clusterState)
	if err := s.join(gen, def, !loaded); err != nil {
		_, _ = clusters.Delete(def.key)
		dropDef()
		return nil, nil, err
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.leave(gen)
			if _, err := clusters.Delete(def.key); err != nil {
				// the last reference: closing could not return every token or statistic (an
				// outage's consequence, said once with its counts; not an operator error)
				logger.Warn("rate_limit: closing the cluster state", zap.String("cluster", def.key.cluster), zap.Error(err))
			}
			dropDef()
		})
	}
	return s, release, nil
}

// liveClusters returns every cluster state in use, for the metrics collector.
func liveClusters() []*clusterState {
	var out []*clusterState
	clusters.Range(func(_, v any) bool {
		if s, ok := v.(*clusterState); ok && s != nil {
			out = append(out, s)
		}
		return true
	})
	return out
}

// instanceID is this process's id in the fleet: hostname, pid and a random part (a restarted
// process is a new instance), made once per process.
var instanceID = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "caddy"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
})

// Interface guards
var _ limiter.InFlightSource = (*connlimit.Counter)(nil)
