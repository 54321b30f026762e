package tierbucket

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// probeTimeout bounds the start-up probe of a Redis Store (docs/security.md, "Permanent
// errors"): `caddy validate` never waits longer for a Redis that does not answer.
const probeTimeout = 2 * time.Second

// validating reports whether this process is `caddy validate` (or `caddy adapt --validate`).
// Caddy provisions the modules the same way for validation and for running; only the command
// line tells them apart. Validation fails on a configuration Redis refuses; a running Caddy
// logs it and keeps serving under the rescue limits.
var validating = sync.OnceValue(func() bool { return isValidateCommand(os.Args) })

func isValidateCommand(args []string) bool {
	if len(args) < 2 {
		return false
	}
	switch args[1] {
	case "validate":
		return true
	case "adapt":
		for _, a := range args[2:] {
			if a == "--" {
				break
			}
			if a == "--validate" {
				return true
			}
			if v, ok := strings.CutPrefix(a, "--validate="); ok {
				b, err := strconv.ParseBool(v)
				return err == nil && b
			}
		}
	}
	return false
}

// probeState is what the start-up probe of a running Caddy found, for the subscription of the
// override notifications (which reports a refused SUBSCRIBE itself).
type probeState struct {
	done   chan struct{} // closed when the probe is over
	cancel context.CancelFunc
	// deniedSubscribe: the probe reported that the user may not subscribe to the cluster's
	// channel, so the subscription's first refusal is not reported a second time.
	deniedSubscribe atomic.Bool
}

// stop ends the probe and waits for it.
func (p *probeState) stop() {
	p.cancel()
	<-p.done
}

// reloadProbeTimeout bounds the probe of a Redis that a reload connects to: how long a reload
// may wait for a Redis that does not answer.
const reloadProbeTimeout = time.Second

// reloading reports whether a configuration is running while this one is provisioned: a
// reload (caddy reload, the admin API's /load), not the first start.
func reloading() bool { return caddy.ActiveContext().Context != nil }

// validateStore checks that Redis accepts the configuration: the connection (TLS, certificates,
// credentials), then the ACL permissions the Store needs on its keys and its notification
// channel (redislua.Store.Probe). It runs under `caddy validate` (at most probeTimeout) and on
// a reload that connects to a Redis (at most reloadProbeTimeout). A refused configuration fails
// with its cause and remedy: validation fails, and the reload is refused while the running
// configuration keeps serving (accepted, it would replace a working limiter by the rescue
// limits). An unreachable or slow Redis says nothing about the configuration and is not an
// error. It runs before the limiter exists, so that no sync loop dials Redis meanwhile. At the
// first start it does nothing: a gateway comes up, and the background probe reports a refused
// configuration at ERROR and keeps to the rescue limits (see probe).
func validateStore(st *redislua.Store, cluster string) error {
	timeout := probeTimeout
	switch {
	case validating():
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

// probe checks, in a running Caddy, the same as validateStore, in the background so that
// start-up and reloads never wait for Redis: a refused connection enters fail_open through the
// limiter (one ERROR line with cause and remedy, the rescue limits, the usual probes and
// recovery); a missing permission the connection does not reveal (a command, the channel) is
// logged at ERROR by the probe, once. A Redis that may evict the limiter's keys is a WARN, once.
// Failed probes are counted in store_errors_total (op="probe"). Validating, it does nothing
// (validateStore did it).
func (s *clusterState) probe(st *redislua.Store, logger *zap.Logger) {
	if validating() {
		return
	}
	cluster := s.key.cluster
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	ps := &probeState{done: make(chan struct{}), cancel: cancel}
	s.probed.Store(ps)
	failed := storeErrors.WithLabelValues(cluster, "probe")
	go func() {
		defer close(ps.done)
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
		if p, ok := store.AsPermanent(err); ok {
			var denied *redislua.PermanentError
			if errors.As(err, &denied) && slices.Contains(denied.Denied, "subscribe") {
				ps.deniedSubscribe.Store(true)
			}
			logRefused(logger, cluster, p)
		}
	}()
}

// watchRefused is told by the Store that Redis refused the subscription of the override
// notifications: the first refusal of an episode is logged at ERROR (unless the start-up probe
// already named the missing permission), every one is counted.
func (s *clusterState) watchRefused(logger *zap.Logger, p store.PermanentError, first bool) {
	storeErrors.WithLabelValues(s.key.cluster, "watch").Inc()
	if !first {
		return
	}
	if ps := s.probed.Load(); ps != nil {
		<-ps.done // bounded by probeTimeout
		if ps.deniedSubscribe.CompareAndSwap(true, false) {
			return // said at start-up
		}
	}
	if logger == nil {
		return
	}
	logger.Error("rate_limit: Redis refuses the subscription to the override notifications; admin overrides "+
		"made on other instances apply here at the next report instead of at once",
		zap.String("cluster", s.key.cluster),
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
