package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/internal/instance"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Limiter is one instance of a cluster's limiter: per-key token buckets fed in batches from
// the Store, and the in-flight counters. It is safe for concurrent use. A decision that the
// local tokens cover takes no lock and makes no Store call.
type Limiter struct {
	lim   *limiter.Limiter
	conns *connlimit.Counter
	parts *instance.Parts // lim and conns, closed together

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// probeTimeout bounds New's check that Redis accepts the configuration.
const probeTimeout = 2 * time.Second

// New validates o, opens the Store and starts the Limiter's background work (reports to the
// Store every sync interval). Invalid options are an error naming the field as in the
// Caddyfile. With Redis, a configuration Redis refuses (credentials, TLS, ACL permissions) is an
// error with its remedy; a Redis that does not answer is not: the Limiter starts under its
// failure mode and recovers when Redis does.
func New(o Options) (*Limiter, error) {
	r, err := o.resolve()
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	var st store.Store
	if r.redis != nil {
		if r.redis.TLSInsecureSkipVerify && o.Logger != nil {
			o.Logger.Warn("ratelimit: TLSInsecureSkipVerify: the Redis server's certificate is not verified; "+
				"anyone on the path to Redis can read and change the rate limits (use RootCAs instead)",
				zap.String("cluster", r.limiter.Cluster.ID))
		}
		rs, err := redislua.Open(*r.redis)
		if err != nil {
			return nil, fmt.Errorf("ratelimit: %w", err)
		}
		if err := refused(rs, r.limiter.Cluster.ID); err != nil {
			_ = rs.Close()
			return nil, err
		}
		st = rs
	} else {
		st = memstore.New(nil)
	}
	lc := r.limiter
	lc.Logger = o.Logger
	lc.Instance = instanceID()
	parts, err := instance.Start(lc, r.conns, st, nil)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	lim := parts.Limiter
	lim.SyncNow() // the fleet's overrides and emergency before the first decision
	return &Limiter{lim: lim, conns: parts.Conns, parts: parts}, nil
}

// refused probes Redis once: an error if Redis refuses the configuration, nil if it accepts
// it or does not answer (an outage says nothing about the configuration).
func refused(rs *redislua.Store, cluster string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	p, ok := store.AsPermanent(rs.Probe(ctx, cluster))
	if !ok {
		return nil
	}
	return fmt.Errorf("ratelimit: Redis refuses this configuration: %s; remedy: %s", p.Error(), p.Remedy())
}

// instanceID names this Limiter in the fleet (the admin API's instance list): host, process
// id and a random part, so that two Limiters of one process are two instances.
func instanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "ratelimit"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) Decision { return l.AllowN(ctx, key, 1) }

// AllowN takes cost tokens of key's app if it has them, and says so; it never waits longer than
// the Redis timeout (only when the local tokens are spent and a lease is needed), and ctx
// bounds that wait too. A refusal carries its reason and when to retry. A cost above the app's
// burst is allowed once a full burst's worth is there; the excess is owed and paid first from
// the next tokens. Misuse (an invalid key, cost <= 0, a closed or nil Limiter) is refused with
// Decision.Err set; it never panics.
func (l *Limiter) AllowN(ctx context.Context, key string, cost int64) Decision {
	app, d := l.app(key, cost)
	if app == nil {
		return d
	}
	return l.book(app, app.Take(ctx, cost, 0), cost)
}

// app finds key's bucket, or returns the decision on a call that cannot take tokens.
func (l *Limiter) app(key string, cost int64) (*limiter.App, Decision) {
	switch {
	case l == nil || l.closed.Load():
		return nil, misuse(ErrClosed, store.ReasonNone)
	case !limiter.ValidAppID(key):
		return nil, misuse(fmt.Errorf("%w: %q", ErrInvalidKey, key), store.ReasonInvalidAppID)
	case cost <= 0:
		return nil, misuse(fmt.Errorf("%w, got %d", ErrInvalidCost, cost), store.ReasonNone)
	}
	app, reason := l.lim.App(key)
	if app == nil {
		return nil, Decision{Reason: reasonOf(reason)}
	}
	return app, Decision{}
}

// book records a decision in the app's statistics (the admin API's figures) and, admitted,
// settles its cost, which is what the cluster's usage counts.
func (l *Limiter) book(app *limiter.App, d limiter.Decision, cost int64) Decision {
	if d.Allowed {
		app.Settle(d, cost, cost)
		app.Record(store.ReasonNone, cost)
	} else {
		app.Record(d.Reason, cost)
	}
	return decisionOf(d)
}

// Wait blocks until cost tokens of key's app are taken, or ctx is done, and returns nil or
// why not. Between attempts it sleeps for the refusal's RetryAfter (no polling): a waiter is
// admitted as soon as the tokens are expected, from this process's tokens or from the shared
// Store. Unlike x/time/rate it does not reserve tokens ahead, so it also ends early when
// another instance frees tokens, and it does not fail up front when ctx's deadline is sooner
// than the expected wait; it fails when ctx is done, with an error that wraps ctx.Err().
// Misuse returns ErrInvalidKey, ErrInvalidCost or ErrClosed; a key UnknownReject refuses
// returns ErrUnknownApp.
func (l *Limiter) Wait(ctx context.Context, key string, cost int64) error {
	if ctx == nil {
		ctx = context.Background() // as AllowN takes it: a nil context never ends
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	app, d := l.app(key, cost)
	switch {
	case d.Err != nil:
		return d.Err
	case app == nil:
		return fmt.Errorf("%w: %q", ErrUnknownApp, key)
	}
	for {
		ld := app.Take(ctx, cost, 0)
		if ld.Allowed {
			l.book(app, ld, cost)
			return nil
		}
		if l.closed.Load() {
			return ErrClosed
		}
		if ld.Reason == store.ReasonAppDisabled {
			app.Record(ld.Reason, cost)
			return fmt.Errorf("%w: %q", ErrAppDisabled, key)
		}
		t := time.NewTimer(ld.RetryAfter)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			app.Record(ld.Reason, cost)
			return fmt.Errorf("ratelimit: waiting for %d tokens of %q (last refusal %s): %w", cost, key, reasonOf(ld.Reason), ctx.Err())
		}
	}
}

// Acquire takes one in-flight slot of key's app and of the cluster (the limits of
// Options.Connections and App.MaxConnections, fleet-wide with Redis). Allowed, the caller must
// call release once the work is done; release is safe to call more than once, and is a no-op
// on a refusal. A refused Decision's Reason is ReasonAppLimitExceeded or
// ReasonClusterLimitExceeded, its Limit the limit that refused and Remaining 0.
func (l *Limiter) Acquire(key string) (release func(), d Decision) {
	app, d := l.app(key, 1)
	if app == nil {
		return func() {}, d
	}
	limit := app.Policy().MaxConnections
	t, reason := l.conns.Acquire(app.Label(), limit)
	if reason != store.ReasonNone {
		app.Record(reason, 0)
		scope, scopeLimit := app.Label(), limit
		if reason == store.ReasonClusterLimitExceeded {
			scope, scopeLimit = "", 0
		}
		most, _ := l.conns.Limits(scope, scopeLimit)
		return func() {}, Decision{Reason: reasonOf(reason), Limit: most}
	}
	h := t.Handle()
	most, cur := l.conns.Limits(app.Label(), limit)
	return h.Release, Decision{Allowed: true, Limit: most, Remaining: max(most-cur, 0)}
}

// Close returns this instance's unspent tokens and in-flight slots to the Store, sends its
// last statistics, leaves the fleet and closes the Store connection. Decisions after Close are
// refused with ErrClosed. It is safe to call more than once.
func (l *Limiter) Close() error {
	if l == nil {
		return ErrClosed
	}
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.closeErr = l.parts.Close()
	})
	return l.closeErr
}
