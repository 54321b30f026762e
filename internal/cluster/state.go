package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/internal/instance"
	"github.com/tierbucket/caddy-tierbucket/internal/metrics"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// State is one cluster's shared state: the limiter, the in-flight counter, the Store.
type State struct {
	key   Key
	parts *instance.Parts // lim and conns, closed together
	lim   *limiter.Limiter
	conns *connlimit.Counter
	hist  *sampler              // the per-second history (nil: none)
	probe atomic.Pointer[probe] // the start-up probe of a Redis Store (nil: none)

	// Decisions taken before there is an app to record them on (shown under "*").
	invalidIDs     atomic.Int64
	unknownRejects atomic.Int64

	mu   sync.Mutex
	gens []*genConfig // the generations holding this state, oldest first; the last one is applied
}

type genConfig struct {
	gen        any
	lim        limiter.Config
	conns      connlimit.Config
	prometheus string
	refs       int
}

func newState(def Definition, opts Options) (*State, error) {
	s := &State{key: def.Key}
	lc := def.Limiter
	var rs *redislua.Store
	var st store.Store
	if def.Redis != nil {
		redislua.RouteLogs(caddy.Log)
		if def.Redis.TLSInsecureSkipVerify && opts.Logger != nil {
			opts.Logger.Warn("rate_limit: tls_insecure_skip_verify: the Redis server's certificate is not verified; "+
				"anyone on the path to Redis can read and change the rate limits (use tls_trust_pool instead)",
				zap.String("cluster", def.Key.Cluster))
		}
		var err error
		rs, err = redislua.Open(*def.Redis)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: redis: %v", def.Key.Cluster, err)
		}
		if err := checkStore(rs, def.Key.Cluster, opts.Validating); err != nil {
			_ = rs.Close()
			return nil, err
		}
		rs.OnWatchRefused(func(p store.PermanentError, first bool) { s.watchRefused(opts.Logger, p, first) })
		st = rs
		lc.KnownInstances, lc.OnLiveInstances = liveInstancesFile(def.Key, opts.Logger)
	} else {
		st = memstore.New(nil)
	}
	parts, err := instance.Start(lc, def.Conns, st, metrics.NewStore(st, def.Key.Cluster))
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %v", def.Key.Cluster, err)
	}
	s.parts, s.lim, s.conns = parts, parts.Limiter, parts.Conns
	if !opts.Validating {
		s.lim.SyncNow() // the fleet's overrides and emergency before the first requests
		if rs != nil {
			s.probe.Store(startProbe(s, rs, opts.Logger))
		}
	}
	if opts.Reading != nil {
		s.hist = startSampler(s, opts.Reading)
	}
	return s, nil
}

// Destruct is called by the pool when the last handler using the state is cleaned up: the
// limiter returns its unspent tokens to L2 and sends its last statistics.
func (s *State) Destruct() error {
	if p := s.probe.Load(); p != nil {
		p.stop()
	}
	if s.hist != nil {
		s.hist.close()
	}
	err := s.parts.Close()
	forgetStoreMetrics(s.key.Cluster)
	return err
}

// ID is the cluster id.
func (s *State) ID() string { return s.key.Cluster }

// Key identifies the state.
func (s *State) Key() Key { return s.key }

// Store is "memory" or "redis" (the Redis identity, addresses included, is not shown).
func (s *State) Store() string {
	if s.key.Store == "memory" {
		return "memory"
	}
	return "redis"
}

// Limiter is the cluster's L3 tier.
func (s *State) Limiter() *limiter.Limiter { return s.lim }

// Connections is the cluster's in-flight counter.
func (s *State) Connections() *connlimit.Counter { return s.conns }

// History is the cluster's per-second history (nil: none kept).
func (s *State) History() *history.Recorder {
	if s.hist == nil {
		return nil
	}
	return s.hist.rec
}

// InvalidAppID counts a request refused for its invalid app id.
func (s *State) InvalidAppID() { s.invalidIDs.Add(1) }

// UnknownApp counts a request refused for its unknown app.
func (s *State) UnknownApp() { s.unknownRejects.Add(1) }

// PreAppRejections are the decisions taken before there is an app (shown under "*").
func (s *State) PreAppRejections() (invalidAppID, unknownApp int64) {
	return s.invalidIDs.Load(), s.unknownRejects.Load()
}

// Prometheus is the address of the Prometheus server the newest configuration names for the
// console's long history ranges (empty: none).
func (s *State) Prometheus() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.gens); n > 0 {
		return s.gens[n-1].prometheus
	}
	return ""
}

// join records one more handler of generation gen; the first of a new generation applies its
// policy to the live state (unless the state was just built from it).
func (s *State) join(gen any, def Definition, fresh bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.gens {
		if g.gen == gen {
			g.refs++
			return nil
		}
	}
	lc := def.Limiter
	lc.Connections = s.conns
	if !fresh {
		if err := s.lim.Update(lc); err != nil {
			return fmt.Errorf("cluster %q: %v", def.Key.Cluster, err)
		}
		s.conns.Update(def.Conns)
		if n := len(s.gens); n > 0 {
			prev := s.gens[n-1]
			logPolicyChange(lc.Logger, prev.lim, lc, prev.conns, def.Conns)
		}
	}
	s.gens = append(s.gens, &genConfig{gen: gen, lim: lc, conns: def.Conns, prometheus: def.Prometheus, refs: 1})
	return nil
}

// leave drops one handler of generation gen. When the newest generation leaves while older
// ones remain (a failed reload), the newest remaining policy is applied again.
func (s *State) leave(gen any) {
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

// Interface guards
var (
	_ metrics.Cluster        = (*State)(nil)
	_ limiter.InFlightSource = (*connlimit.Counter)(nil)
)
