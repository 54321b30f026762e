package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/internal/metrics"
	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// probeTimeout bounds the start-up probe of a Redis Store (docs/security.md, "Permanent
// errors"): `caddy validate` never waits longer for a Redis that does not answer.
const probeTimeout = 2 * time.Second

// reloadProbeTimeout bounds the probe of a Redis that a reload connects to: how long a reload
// may wait for a Redis that does not answer.
const reloadProbeTimeout = time.Second

// reloading reports whether a configuration is running while this one is provisioned: a
// reload (caddy reload, the admin API's /load), not the first start.
func reloading() bool { return caddy.ActiveContext().Context != nil }

// checkStore checks that Redis accepts the configuration: the connection (TLS, certificates,
// credentials), then the ACL permissions the Store needs on its keys and its notification
// channel (redislua.Store.Probe). It runs under `caddy validate` (at most probeTimeout) and on
// a reload that connects to a Redis (at most reloadProbeTimeout). A refused configuration fails
// with its cause and remedy: validation fails, and the reload is refused while the running
// configuration keeps serving (accepted, it would replace a working limiter by the rescue
// limits). An unreachable or slow Redis says nothing about the configuration and is not an
// error. It runs before the limiter exists, so that no sync loop dials Redis meanwhile. At the
// first start it does nothing: a gateway comes up, and the background probe reports a refused
// configuration at ERROR and keeps to the rescue limits (startProbe).
func checkStore(st *redislua.Store, cluster string, validating bool) error {
	timeout := probeTimeout
	switch {
	case validating:
	case reloading():
		timeout = reloadProbeTimeout
	default:
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, ok := store.AsPermanent(st.Probe(ctx, cluster))
	if !ok {
		return nil // accepted, or not reachable: an outage is not a configuration error
	}
	return fmt.Errorf("cluster %q: Redis refuses this configuration: %s; remedy: %s", cluster, p.Error(), p.Remedy())
}

// probe is the start-up probe of a running Caddy's Redis Store.
type probe struct {
	done   chan struct{} // closed when the probe is over
	cancel context.CancelFunc
	// deniedSubscribe: the probe reported that the user may not subscribe to the cluster's
	// channel, so the subscription's first refusal is not reported a second time.
	deniedSubscribe atomic.Bool
}

// stop ends the probe and waits for it.
func (p *probe) stop() {
	p.cancel()
	<-p.done
}

// startProbe checks, in a running Caddy, the same as checkStore, in the background so that
// start-up and reloads never wait for Redis: a refused connection enters fail_open through the
// limiter (one ERROR line with cause and remedy, the rescue limits, the usual probes and
// recovery); a missing permission the connection does not reveal (a command, the channel) is
// logged at ERROR by the probe, once. A Redis that may evict the limiter's keys is a WARN, once.
// Failed probes are counted in store_errors_total (op="probe").
func startProbe(s *State, st *redislua.Store, logger *zap.Logger) *probe {
	cluster := s.key.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	p := &probe{done: make(chan struct{}), cancel: cancel}
	failed := metrics.StoreErrors(cluster, "probe")
	go func() {
		defer close(p.done)
		defer cancel()
		if err := st.Ping(ctx); err != nil {
			failed.Inc()
			if _, ok := store.AsPermanent(err); ok {
				s.lim.StoreFailed(err)
			}
			return
		}
		err := st.CheckACL(ctx, cluster)
		if err != nil {
			failed.Inc()
		}
		if desc := st.Evicting(ctx); desc != "" && logger != nil {
			logger.Warn("rate_limit: Redis may evict this limiter's keys when its memory is full ("+desc+
				"): an evicted bucket comes back full, so the quotas stop holding while memory is short",
				zap.String("cluster", cluster),
				zap.String("remedy", "give the limiter a Redis with maxmemory-policy noeviction, or without maxmemory"))
		}
		if perm, ok := store.AsPermanent(err); ok {
			var denied *redislua.PermanentError
			if errors.As(err, &denied) && slices.Contains(denied.Denied, "subscribe") {
				p.deniedSubscribe.Store(true)
			}
			logRefused(logger, cluster, perm)
		}
	}()
	return p
}

// watchRefused is told by the Store that Redis refused the subscription of the override
// notifications: the first refusal of an episode is logged at ERROR (unless the start-up probe
// already named the missing permission), every one is counted.
func (s *State) watchRefused(logger *zap.Logger, p store.PermanentError, first bool) {
	metrics.StoreErrors(s.key.Cluster, "watch").Inc()
	if !first {
		return
	}
	if pr := s.probe.Load(); pr != nil {
		<-pr.done // bounded by probeTimeout
		if pr.deniedSubscribe.CompareAndSwap(true, false) {
			return // said at start-up
		}
	}
	if logger == nil {
		return
	}
	logger.Error("rate_limit: Redis refuses the subscription to the override notifications; admin overrides "+
		"made on other instances apply here at the next report instead of at once",
		zap.String("cluster", s.key.Cluster),
		zap.String("cause", p.Error()),
		zap.String("remedy", p.Remedy()))
}

func logRefused(logger *zap.Logger, cluster string, p store.PermanentError) {
	if logger == nil {
		return
	}
	logger.Error("rate_limit: Redis refuses this instance's configuration",
		zap.String("cluster", cluster),
		zap.String("cause", p.Error()),
		zap.String("remedy", p.Remedy()))
}
