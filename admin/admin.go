// Package admin is the rate_limit handler's part of Caddy's admin API: the admin.api.rate_limit
// module, whose routes (under /rate_limit/) show this process's clusters, apps, in-flight
// counts and emergency state. The only state it changes is the operator emergency (POST
// /rate_limit/emergency/activate and /deactivate), fleet-wide through the cluster's Store;
// every change is logged and emitted as the rate_limit_config_changed event. Caddy's admin
// endpoint serves it with its own access control (listen address, origin checks, remote admin).
//
// It reads the live cluster states from package internal/cluster, as reverse_proxy's admin
// routes read its upstream pool.
package admin

import (
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func init() {
	caddy.RegisterModule(API{})
}

// Cluster is one cluster's shared state as this process holds it.
type Cluster interface {
	// ID is the cluster id.
	ID() string
	// Store is "memory" (the embedded store) or "redis".
	Store() string
	// Limiter is the cluster's L3 tier: buckets, statistics, L1's last known state.
	Limiter() *limiter.Limiter
	// Connections is the cluster's in-flight counter.
	Connections() *connlimit.Counter
	// History is the cluster's per-second history (nil: none kept).
	History() *history.Recorder
}

// PreAppCounter may be implemented by a Cluster that counts decisions taken before there is an
// app to record them on (an invalid app id; an unknown app with unknown_app reject). They are
// shown under the app "*", as in the metrics.
type PreAppCounter interface {
	PreAppRejections() (invalidAppID, unknownApp int64)
}

// liveClusters lists this process's live cluster states.
func liveClusters() []Cluster {
	live := cluster.Live()
	out := make([]Cluster, len(live))
	for i, s := range live {
		out[i] = s
	}
	return out
}

// API is the admin.api.rate_limit module: Caddy instantiates it when it starts its admin
// endpoint and serves its Routes.
type API struct {
	// source, when set, replaces the process's live clusters (tests).
	source func() []Cluster
	// readOnly refuses every change (403): the API as a site serves it without allow_changes.
	readOnly bool
	// stop, when closed, ends the open streams (a site's server shutting down); nil: never.
	stop <-chan struct{}

	ctx    caddy.Context
	logger *zap.Logger      // nil (not provisioned): Caddy's default logger, named as Provision names it
	events *caddyevents.App // nil: no events app, no events
}

// Provision keeps the module's logger and Caddy's events app (for rate_limit_config_changed).
// Without an events app the API works and emits nothing.
func (a *API) Provision(ctx caddy.Context) error {
	a.ctx = ctx
	a.logger = ctx.Logger()
	if a.logger.Name() == "" {
		// Caddy provisions admin routers outside any module's context, so its logger has no
		// name, and the change log would be the only plugin line without one.
		a.logger = a.logger.Named(loggerName)
	}
	a.events = eventsApp(ctx, a.logger)
	return nil
}

// eventsApp is ctx's events app, or nil when there is none. ctx is the context Caddy
// provisions admin routers in, which always has a config: ctx.App loads the events app then,
// configured or not, and fails only if its configuration does not load.
func eventsApp(ctx caddy.Context, log *zap.Logger) *caddyevents.App {
	v, err := ctx.App("events")
	if err != nil {
		log.Warn("rate_limit admin API: no events app: changes are logged but not emitted as events", zap.Error(err))
		return nil
	}
	app, _ := v.(*caddyevents.App)
	return app
}

// CaddyModule returns the Caddy module information.
func (API) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.rate_limit",
		New: func() caddy.Module { return new(API) },
	}
}

// The JSON views. Field names are the Caddyfile/JSON config names where there is one
// (guaranteed, burst, priority, max_borrow, max_connections, warmup, capacity), snake_case
// otherwise.

// ClusterView is GET /rate_limit/: this instance's view of one cluster.
type ClusterView struct {
	Cluster  string  `json:"cluster"`
	Instance string  `json:"instance"` // this process's id in the fleet
	Store    string  `json:"store"`    // "memory" or "redis"
	Capacity float64 `json:"capacity"` // L1 rate in force, cost tokens/s; 0 = no cluster limit
	// Where the capacity in force comes from: config, adaptive (learned) or override (pinned).
	CapacitySource string        `json:"capacity_source,omitempty"`
	Adaptive       *AdaptiveView `json:"adaptive"` // the learned capacity; null when it is static
	UnknownApp     string        `json:"unknown_app"`
	Degradation    LevelView     `json:"degradation_level"`
	Usage          float64       `json:"usage"`   // L1 usage: fleet-wide admitted cost per second / capacity
	Factors        []float64     `json:"factors"` // L1's refill factor per priority, index = priority
	Emergency      EmergencyView `json:"emergency"`
	LiveInstances  int           `json:"live_instances"`
	LocalHitRatio  float64       `json:"local_hit_ratio"` // admitted from local tokens / admitted (see Leases)
	// Leases, LeaseTokens and LocalHitRatio are as of the history's last reading (at most a
	// second old) when the cluster keeps one.
	Leases       int64   `json:"leases"`
	LeaseTokens  int64   `json:"lease_tokens"`
	StoreLatency float64 `json:"store_latency_seconds"` // moving average of Store calls
	// ReadOnly: this API refuses changes (a console served on a site without allow_changes).
	ReadOnly bool `json:"read_only"`
}

// LevelView is a degradation level: normal 0, mild 1, significant 2, fail_open 3.
type LevelView struct {
	Name   string `json:"name"`
	Number int    `json:"number"`
}

// EmergencyView is L1's emergency state as of the last successful report (GET
// /rate_limit/emergency, and part of GET /rate_limit/).
type EmergencyView struct {
	Active bool       `json:"active"`
	Source string     `json:"source"` // "operator" (the admin API) or "auto" (L1's usage threshold) while active, else ""
	Reason string     `json:"reason"` // the operator's reason; "auto" for L1's own
	Until  *time.Time `json:"until"`  // the operator emergency's end; null: until deactivated / L1 leaves it
}

// AppView is one app (GET /rate_limit/apps/<id>): a configured app, an active isolated tenant,
// or "*", every unknown app together (their shared bucket and the isolated ones).
type AppView struct {
	ID     string      `json:"id"`
	Policy *PolicyView `json:"policy"` // null for "*" with unknown_app reject (no bucket)
	Source string      `json:"source"` // "caddyfile" (the config), "override" (the config's, overridden), "api" (created by PUT) or "isolated"

	// Override is the fields the app's admin override sets; null without one.
	Override map[string]any `json:"override"`
	// OverrideNotApplied is an override the Store holds that this instance leaves out, because
	// it does not fit the loaded config (the policy shown is the config's).
	OverrideNotApplied *NotAppliedView `json:"override_not_applied,omitempty"`

	// Live is the app's decisions and cost over the last history.LiveWindow seconds on this
	// instance (the console's live window).
	Live history.Live `json:"live"`

	LocalTokens int64        `json:"local_tokens"`
	LocalDebt   int64        `json:"local_debt"`
	Requests    RequestsView `json:"requests"`
	Cost        int64        `json:"cost"` // admitted cost, settled
	LocalHits   int64        `json:"local_hits"`
	Leases      int64        `json:"leases"`
	LeaseTokens int64        `json:"lease_tokens"`
	Borrowed    float64      `json:"borrowed"` // L2's borrowed tokens, as of this instance's last lease
	Debt        float64      `json:"debt"`     // L2's borrowing debt, as of this instance's last lease

	InFlight            int64 `json:"in_flight"` // on this instance
	Peak                int64 `json:"peak"`
	ConnectionsRejected int64 `json:"connections_rejected"` // by the app's own max_connections
	Leaked              int64 `json:"leaked"`
}

// NotAppliedView is a stored override this instance leaves out of its configuration, and why.
// DELETE removes it.
type NotAppliedView struct {
	Override map[string]any `json:"override"`
	Reason   string         `json:"reason"`
}

// PolicyView is an app's effective policy, defaults applied.
type PolicyView struct {
	Guaranteed     float64 `json:"guaranteed"`
	Burst          float64 `json:"burst"`
	Priority       int     `json:"priority"`
	MaxBorrow      float64 `json:"max_borrow"`
	MaxConnections int64   `json:"max_connections"`
	Warmup         string  `json:"warmup"` // a Caddy duration ("0s": off)
	Enabled        bool    `json:"enabled"`
}

// newPolicyView is p as the API shows it.
func newPolicyView(p store.AppPolicy) PolicyView {
	return PolicyView{
		Guaranteed: num(p.Guaranteed), Burst: num(p.Burst), Priority: p.Priority,
		MaxBorrow: num(p.MaxBorrow), MaxConnections: p.MaxConnections, Warmup: p.Warmup.String(),
		Enabled: !p.Disabled,
	}
}

// RequestsView counts final decisions: admitted, rejected, and the rejections by reason
// (reasons with no rejection are left out).
type RequestsView struct {
	Allowed  int64            `json:"allowed"`
	Rejected int64            `json:"rejected"`
	Reasons  map[string]int64 `json:"reasons"`
}

// ConnectionsView is GET /rate_limit/connections: the cluster's total and one page of apps.
type ConnectionsView struct {
	Cluster    string           `json:"cluster"`
	Total      ConnectionView   `json:"total"` // the cluster's own count and limit
	Apps       []ConnectionView `json:"apps"`
	AppCount   int              `json:"app_count"`   // apps matching ?q, on every page
	NextCursor *string          `json:"next_cursor"` // the next page's ?cursor; null on the last page
	Sort       string           `json:"sort"`
}

// ConnectionView is one scope's in-flight figures on this instance.
type ConnectionView struct {
	App      string `json:"app,omitempty"` // absent for the cluster total
	Current  int64  `json:"current"`
	Peak     int64  `json:"peak"`
	Limit    int64  `json:"limit"`
	Remote   int64  `json:"remote"` // slots the other live instances hold (as of this instance's last slot lease)
	Held     int64  `json:"held"`   // slots this instance holds
	Rejected int64  `json:"rejected"`
	Leaked   int64  `json:"leaked"`
}

// Interface guards.
var (
	_ caddy.Module      = (*API)(nil)
	_ caddy.Provisioner = (*API)(nil)
	_ caddy.AdminRouter = (*API)(nil)
)
