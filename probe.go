package tierbucket

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

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
var validating = sync.OnceValue(func() bool {
	if len(os.Args) < 2 {
		return false
	}
	switch os.Args[1] {
	case "validate":
		return true
	case "adapt":
		for _, a := range os.Args[2:] {
			if a == "--validate" || a == "-validate" || strings.HasPrefix(a, "--validate=true") {
				return true
			}
		}
	}
	return false
})

// probe checks, when the cluster's shared state is created, that Redis accepts the
// configuration: the connection (TLS, certificates, credentials), then the ACL permissions the
// Store needs on its keys and its notification channel (redislua.Store.Probe). An unreachable
// or slow Redis says nothing about the configuration and is never an error here.
//
// Validating, the probe runs at once (at most probeTimeout) and a refused configuration fails
// validation with its cause and remedy. Running, it runs in the background so that start-up
// and reloads never wait for Redis: a refused connection enters fail_open through the limiter
// (one ERROR line with cause and remedy, the rescue limits, the usual probes and recovery); a
// missing permission the connection does not reveal (a command, the channel) is logged at
// ERROR by the probe.
func (s *clusterState) probe(st *redislua.Store, logger *zap.Logger) error {
	cluster := s.key.cluster
	if validating() {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		p, ok := store.AsPermanent(st.Probe(ctx, cluster))
		if !ok {
			return nil
		}
		logRefused(logger, cluster, p)
		return fmt.Errorf("cluster %q: Redis refuses this configuration: %s; remedy: %s", cluster, p.Error(), p.Remedy())
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	done := make(chan struct{})
	s.stopProbe = func() {
		cancel()
		<-done
	}
	go func() {
		defer close(done)
		defer cancel()
		if err := st.Ping(ctx); err != nil {
			if _, ok := store.AsPermanent(err); ok {
				s.lim.StoreFailed(err)
			}
			return
		}
		if p, ok := store.AsPermanent(st.CheckACL(ctx, cluster)); ok {
			logRefused(logger, cluster, p)
		}
	}()
	return nil
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
