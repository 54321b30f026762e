package cluster

import (
	"fmt"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/internal/metrics"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// Config generations. Every config load has its own caddy.Context, and with it its own metrics
// registry (caddy.NewContext makes one per load); that registry pointer names the generation.
// Two things are tracked per generation:
//
//   - definitions: the fingerprint of each cluster id's definition. A second handler of the
//     same generation that defines the same cluster id differently is a provisioning error
//     ("conflicting definitions of one cluster id in one config"). Handlers of different
//     generations may differ: that is a reload.
//   - State.gens: the policies applied to a state, in provisioning order. When the newest
//     generation goes away while an older one still holds the state (a reload that failed
//     after this handler was provisioned, so Caddy keeps running the old config), the older
//     policy is applied again, so a failed reload leaves the running policy as it was.
var (
	states = caddy.NewUsagePool()

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

// Key identifies one shared state: a cluster id on one Store, reached with one set of
// credentials and TLS settings.
type Key struct {
	Cluster string
	Store   string // "memory" or the Redis identity
	Conn    string // a digest of the Redis credentials and TLS settings
}

// Definition is everything that makes up a cluster's shared state in one handler's config.
type Definition struct {
	Key Key
	// Fingerprint is the shared part of the configuration as written: two handlers of one
	// config that name the same cluster must have the same.
	Fingerprint string
	Limiter     limiter.Config
	Conns       connlimit.Config
	Redis       *redislua.Config // nil: the memory store
	// Prometheus is the address of a Prometheus server scraping the fleet (empty: none), for
	// the console's long history ranges.
	Prometheus string
}

// Options are the process's facts a state is built with.
type Options struct {
	Logger *zap.Logger
	// Validating: this process is `caddy validate`. The state does no background work, and a
	// configuration Redis refuses is an error.
	Validating bool
	// Reading is what the per-second history records of a state (nil: no history).
	Reading Reading
}

// Acquire joins the shared state that def describes for the generation of ctx, creating it if
// needed. The returned func gives the reference back (exactly once).
func Acquire(ctx caddy.Context, def Definition, opts Options) (*State, func(), error) {
	gen := any(ctx.GetMetricsRegistry())
	dk := defKey{gen: gen, cluster: def.Key.Cluster}
	def.Limiter.Logger = opts.Logger

	definitions.Lock()
	e := definitions.m[dk]
	if e != nil && e.fingerprint != def.Fingerprint {
		definitions.Unlock()
		return nil, nil, fmt.Errorf("cluster %q: conflicting definitions in one config: every "+
			"rate_limit handler with this cluster id must define it identically (use a snippet "+
			"and import it), or use another cluster id", def.Key.Cluster)
	}
	if e == nil {
		e = &defEntry{fingerprint: def.Fingerprint}
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

	v, loaded, err := states.LoadOrNew(def.Key, func() (caddy.Destructor, error) {
		return newState(def, opts)
	})
	if err != nil {
		dropDef()
		return nil, nil, err
	}
	s := v.(*State)
	if err := s.join(gen, def, !loaded); err != nil {
		_, _ = states.Delete(def.Key)
		dropDef()
		return nil, nil, err
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.leave(gen)
			if _, err := states.Delete(def.Key); err != nil {
				// the last reference: closing could not return every token or statistic (an
				// outage's consequence, said once with its counts; not an operator error)
				opts.Logger.Warn("rate_limit: closing the cluster state", zap.String("cluster", def.Key.Cluster), zap.Error(err))
			}
			dropDef()
		})
	}
	return s, release, nil
}

// Live returns every cluster state in use.
func Live() []*State {
	var out []*State
	states.Range(func(_, v any) bool {
		if s, ok := v.(*State); ok && s != nil {
			out = append(out, s)
		}
		return true
	})
	return out
}

// References is the number of handlers holding the state of key (tests).
func References(key Key) (int, bool) { return states.References(key) }

// Collector is the Prometheus collector of every live state.
var Collector = metrics.NewCollector(func() []metrics.Cluster {
	live := Live()
	out := make([]metrics.Cluster, len(live))
	for i, s := range live {
		out[i] = s
	}
	return out
})

// forgetStoreMetrics removes the Store series of a cluster id that no live state uses any
// more (a reload renamed or removed it). A state of the same id on another Store (a reload
// that switches stores) keeps them: it is created before the old one is closed.
func forgetStoreMetrics(cluster string) {
	for _, s := range Live() {
		if s.key.Cluster == cluster {
			return
		}
	}
	metrics.ForgetStore(cluster)
}
