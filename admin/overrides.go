package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Fleet-wide policy overrides: PUT and DELETE /rate_limit/apps/<id> and /rate_limit/clusters/<id>
// (limiter.Limiter.SetAppOverride, SetClusterOverride). A change is validated exactly like the
// loaded configuration (400 naming each bad field, nothing changed), stored, applied here at
// once and by the other instances when the Store notifies them (or at their next report).

// appOverrideRequest is the body of PUT /rate_limit/apps/<id>: the fields to override.
type appOverrideRequest struct {
	Guaranteed     *float64        `json:"guaranteed"`
	Burst          *float64        `json:"burst"`
	Priority       *int            `json:"priority"`
	MaxBorrow      *float64        `json:"max_borrow"`
	MaxConnections *int64          `json:"max_connections"`
	Warmup         json.RawMessage `json:"warmup"` // a Caddy duration ("30s", "1d") or nanoseconds
	Enabled        *bool           `json:"enabled"`
}

// clusterOverrideRequest is the body of PUT /rate_limit/clusters/<id>.
type clusterOverrideRequest struct {
	Capacity           *float64   `json:"capacity"`
	ReservedRatio      *float64   `json:"reserved_ratio"`
	EmergencyThreshold *float64   `json:"emergency_threshold"`
	EmergencyRatios    *[]float64 `json:"emergency_ratios"`
}

// ClusterPolicyView is GET /rate_limit/clusters/<id>: the cluster's L1 policy in force.
type ClusterPolicyView struct {
	Cluster  string         `json:"cluster"`
	Policy   ClusterPolicy  `json:"policy"`
	Source   string         `json:"source"`   // "caddyfile" or "override"
	Override map[string]any `json:"override"` // the fields the override sets; null without one
	// The capacity in force and its source (config, adaptive or override), and the learned
	// capacity (null when static; paused while an override pins the capacity).
	CapacityInForce float64       `json:"capacity_in_force"`
	CapacitySource  string        `json:"capacity_source,omitempty"`
	Adaptive        *AdaptiveView `json:"adaptive"`
	// OverridesNotApplied lists every stored override this instance leaves out of its
	// configuration (the cluster's, "cluster", and apps', "app:<id>"), with the reason.
	OverridesNotApplied map[string]string `json:"overrides_not_applied,omitempty"`
}

// ClusterPolicy is an L1 policy as the config names its fields.
type ClusterPolicy struct {
	Capacity           float64   `json:"capacity"`
	ReservedRatio      float64   `json:"reserved_ratio"`
	EmergencyThreshold float64   `json:"emergency_threshold"`
	EmergencyRatios    []float64 `json:"emergency_ratios"`
}

// RemovedView answers the DELETE of an app that existed through its override only.
type RemovedView struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

// fieldsError is a 400 whose body names each bad field:
// {"error": "…", "fields": {"burst": "must be >= guaranteed (100), got 50"}}.
type fieldsError struct {
	msg    string
	fields map[string]string
}

func (e fieldsError) Error() string { return e.msg }

// badFields builds the 400 for a store.FieldErrors (or a single field's problem). The field
// "apps" (the guarantees no longer fit the capacity) is reported on admission, the field the
// operator changed.
func badFields(what string, fe store.FieldErrors, admission string) fieldsError {
	e := fieldsError{fields: map[string]string{}}
	for i := range fe {
		if fe[i].Field == "apps" {
			fe[i].Field = admission
			fe[i].Problem = "leaves too little for the apps' guarantees: " + fe[i].Problem
		}
		if _, dup := e.fields[fe[i].Field]; !dup {
			e.fields[fe[i].Field] = fe[i].Problem
		}
	}
	e.msg = fmt.Sprintf("invalid %s: %v", what, fe)
	return e
}

// putApp is PUT /rate_limit/apps/<id>.
func (a API) putApp(id string) action {
	return func(w http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
		var req appOverrideRequest
		present, err := readJSON(r, &req)
		if err != nil {
			return nil, err
		}
		if !present {
			return nil, apiError(http.StatusBadRequest, `missing request body: {"guaranteed": 100, "burst": 200, …} (the fields to override)`)
		}
		if req.MaxConnections != nil && *req.MaxConnections <= 0 {
			// In a policy 0 stands for connections.app: an override of 0 would quietly lift a
			// configured limit to that default.
			return nil, badFields(fmt.Sprintf("override of app %q", id), store.FieldErrors{{
				Field:   "max_connections",
				Problem: fmt.Sprintf("must be >= 1 (leave it out, or DELETE the override, for the configured limit), got %d", *req.MaxConnections),
			}}, "")
		}
		o := limiter.AppOverride{
			Guaranteed: req.Guaranteed, Burst: req.Burst, Priority: req.Priority,
			MaxBorrow: req.MaxBorrow, MaxConnections: req.MaxConnections, Enabled: req.Enabled,
		}
		if len(req.Warmup) > 0 && string(req.Warmup) != "null" {
			var d caddy.Duration
			if err := d.UnmarshalJSON(req.Warmup); err != nil {
				return nil, badFields(fmt.Sprintf("override of app %q", id), store.FieldErrors{{
					Field:   "warmup",
					Problem: fmt.Sprintf("%s is not a duration (a Caddy duration such as \"30s\"): %v", req.Warmup, err),
				}}, "")
			}
			o.Warmup = (*time.Duration)(&d)
		}
		if len(o.Fields()) == 0 {
			return nil, apiError(http.StatusBadRequest, "the override sets no field: give at least one of guaranteed, "+
				"burst, priority, max_borrow, max_connections, warmup, enabled (DELETE removes an override)")
		}
		keepOther(&o, c, id)
		return a.setApp(r, c, id, &o)
	}
}

// keepOther makes enabling or disabling an app and editing its policy independent changes: a
// PUT of enabled alone keeps the override's policy fields, and a PUT of policy fields keeps
// its enabled (a quota edit never enables a disabled app by accident). A PUT otherwise replaces
// the override whole.
func keepOther(o *limiter.AppOverride, c Cluster, id string) {
	cur, ok, _ := c.Limiter().StoredAppOverride(id)
	if !ok {
		return
	}
	if o.Enabled == nil {
		o.Enabled = cur.Enabled
		return
	}
	if len(o.Fields()) == 1 { // enabled alone
		enabled := o.Enabled
		*o = cur
		o.Enabled = enabled
	}
}

// deleteApp is DELETE /rate_limit/apps/<id>: the configured policy again, or no app at all for
// one that exists through its override only.
func (a API) deleteApp(id string) action {
	return func(w http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
		if _, err := readJSON(r, &struct{}{}); err != nil {
			return nil, err
		}
		if _, ok, _ := c.Limiter().StoredAppOverride(id); !ok {
			if v, err := appView(c, id); err == nil && id != wildcardApp {
				return v, nil // nothing to remove: the configured policy is in force
			}
			return nil, apiError(http.StatusNotFound, "app %q of cluster %q has no override", id, c.ID())
		}
		return a.setApp(r, c, id, nil)
	}
}

// setApp stores one app override change, logs it and answers with the app as it is now.
func (a API) setApp(r *http.Request, c Cluster, id string, o *limiter.AppOverride) (any, error) {
	if id == wildcardApp {
		return nil, apiError(http.StatusBadRequest, "app %q: the template of unknown apps is set in the config only", id)
	}
	ctx, cancel := context.WithTimeout(r.Context(), setTimeout)
	defer cancel()
	res, err := c.Limiter().SetAppOverride(ctx, id, o)
	if err != nil {
		return nil, changeError(c, fmt.Sprintf("override of app %q", id), "guaranteed", err)
	}
	change := "app_override_set"
	if o == nil {
		change = "app_override_removed"
	}
	a.logChange(r, c, change, map[string]any{"app": id, "requested": overrideFields(o)},
		appPolicyMap(c, id, res.Before), appPolicyMap(c, id, res.After))
	if v, err := appView(c, id); err == nil {
		return v, nil
	}
	return RemovedView{ID: id, Removed: true}, nil
}

// clusterPolicyView is GET /rate_limit/clusters/<id>.
func clusterPolicyView(c Cluster) ClusterPolicyView {
	lim := c.Limiter()
	v := ClusterPolicyView{Cluster: c.ID(), Policy: clusterPolicy(lim.Config().Cluster), Source: lim.ClusterSource()}
	capacity, source := lim.Capacity()
	v.CapacityInForce, v.CapacitySource, v.Adaptive = num(capacity), source, adaptiveView(c)
	if o, ok := lim.ClusterOverride(); ok {
		v.Override = overrideFields(&o)
	}
	for key, why := range lim.SkippedOverrides() {
		if v.OverridesNotApplied == nil {
			v.OverridesNotApplied = map[string]string{}
		}
		v.OverridesNotApplied[key] = why.Error()
	}
	return v
}

func clusterPolicy(p store.ClusterPolicy) ClusterPolicy {
	return ClusterPolicy{
		Capacity: num(p.Capacity), ReservedRatio: num(p.ReservedRatio),
		EmergencyThreshold: num(p.EmergencyThreshold), EmergencyRatios: p.EmergencyRatios[:],
	}
}

// putCluster is PUT /rate_limit/clusters/<id>.
func (a API) putCluster(w http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
	var req clusterOverrideRequest
	present, err := readJSON(r, &req)
	if err != nil {
		return nil, err
	}
	if !present {
		return nil, apiError(http.StatusBadRequest, `missing request body: {"capacity": 1000, …} (the fields to override)`)
	}
	o := limiter.ClusterOverride{
		Capacity: req.Capacity, ReservedRatio: req.ReservedRatio,
		EmergencyThreshold: req.EmergencyThreshold,
	}
	if req.EmergencyRatios != nil {
		if n := len(*req.EmergencyRatios); n != store.MaxPriority+1 {
			return nil, badFields(fmt.Sprintf("override of cluster %q", c.ID()), store.FieldErrors{{
				Field:   "emergency_ratios",
				Problem: fmt.Sprintf("needs %d values (P0..P%d), got %d", store.MaxPriority+1, store.MaxPriority, n),
			}}, "")
		}
		var ratios [store.MaxPriority + 1]float64
		copy(ratios[:], *req.EmergencyRatios)
		o.EmergencyRatios = &ratios
	}
	if len(o.Fields()) == 0 {
		return nil, apiError(http.StatusBadRequest, "the override sets no field: give at least one of capacity, "+
			"reserved_ratio, emergency_threshold, emergency_ratios (DELETE removes an override)")
	}
	admission := "reserved_ratio"
	if o.Capacity != nil {
		admission = "capacity"
	}
	return a.setCluster(r, c, &o, admission)
}

// deleteCluster is DELETE /rate_limit/clusters/<id>: the configured L1 policy again.
func (a API) deleteCluster(w http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
	if _, err := readJSON(r, &struct{}{}); err != nil {
		return nil, err
	}
	if _, ok, _ := c.Limiter().StoredClusterOverride(); !ok {
		return clusterPolicyView(c), nil // nothing to remove
	}
	return a.setCluster(r, c, nil, "capacity")
}

func (a API) setCluster(r *http.Request, c Cluster, o *limiter.ClusterOverride, admission string) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), setTimeout)
	defer cancel()
	res, err := c.Limiter().SetClusterOverride(ctx, o)
	if err != nil {
		return nil, changeError(c, fmt.Sprintf("override of cluster %q", c.ID()), admission, err)
	}
	change := "cluster_override_set"
	if o == nil {
		change = "cluster_override_removed"
	}
	a.logChange(r, c, change, map[string]any{"requested": overrideFields(o)}, policyMap(res.Before), policyMap(res.After))
	return clusterPolicyView(c), nil
}

// changeError maps a failed change: bad fields 400, too many overrides or a change that kept
// losing races with other instances' 409, anything else is the Store's failure (503).
func changeError(c Cluster, what, admission string, err error) error {
	var fe store.FieldErrors
	switch {
	case errors.As(err, &fe):
		return badFields(what, fe, admission)
	case errors.Is(err, store.ErrTooManyOverrides):
		return apiError(http.StatusConflict, "%s: cluster %q already has %d overrides: remove some first",
			what, c.ID(), store.MaxOverrideEntries)
	case errors.Is(err, store.ErrVersionConflict):
		return apiError(http.StatusConflict, "%s: not applied: other instances kept changing the cluster's "+
			"overrides at the same time; read them back and try again", what)
	}
	return storeFailure(what, err, "read it back")
}

// storeFailure is the 503 of a change the Store did not take. A refusal of this instance's
// credentials, permissions or certificate says so and what to fix; any other failure may still
// have been applied (a timeout after Redis ran the script), so the operator reads it back.
func storeFailure(what string, err error, readBack string) error {
	if p, ok := store.AsPermanent(err); ok {
		return apiError(http.StatusServiceUnavailable, "%s: not applied: the Store refuses this instance's "+
			"configuration: %v (%s)", what, p, p.Remedy())
	}
	return apiError(http.StatusServiceUnavailable, "%s: the Store failed: %v (not applied; after a timeout it may "+
		"still have been stored: %s)", what, err, readBack)
}

// logChange logs a change at INFO and emits it as the rate_limit_config_changed event.
func (a API) logChange(r *http.Request, c Cluster, change string, details map[string]any, before, after any) {
	a.log().Info("rate_limit: "+change+" through the admin API",
		zap.String("cluster", c.ID()),
		zap.String("remote_addr", r.RemoteAddr),
		zap.Any("details", details),
		zap.Any("before", before),
		zap.Any("after", after))
	if a.events != nil && a.events.ShouldEmit(configChangedEvent) {
		data := map[string]any{
			"cluster": c.ID(), "change": change, "remote_addr": r.RemoteAddr,
			"before": before, "after": after,
		}
		for k, v := range details {
			data[k] = v
		}
		a.events.Emit(a.ctx, configChangedEvent, data)
	}
	a.record(r, c, change, details, before, after)
}

// overrideFields is an override as the JSON object of the fields it sets (warmup as a Caddy
// duration string), nil for none.
func overrideFields(o any) map[string]any {
	var m map[string]any
	switch o := o.(type) {
	case *limiter.AppOverride:
		if o == nil {
			return nil
		}
		m = toMap(o)
		if o.Warmup != nil {
			m["warmup"] = o.Warmup.String()
		}
	case *limiter.ClusterOverride:
		if o == nil {
			return nil
		}
		m = toMap(o)
	}
	return m
}

// appPolicyMap is policyMap of an app's policy with its effective max_connections (0 stands
// for connections.app), as GET shows it.
func appPolicyMap(c Cluster, id string, policy any) map[string]any {
	p, ok := policy.(*store.AppPolicy)
	if !ok || p == nil {
		return policyMap(policy)
	}
	q := *p
	q.MaxConnections = maxConnections(id, q, c.Connections())
	return policyMap(&q)
}

// policyMap is a policy (*store.AppPolicy or *store.ClusterPolicy; nil: none) as the JSON
// object the API shows.
func policyMap(p any) map[string]any {
	switch p := p.(type) {
	case *store.AppPolicy:
		if p != nil {
			return toMap(newPolicyView(*p))
		}
	case *store.ClusterPolicy:
		if p != nil {
			return toMap(clusterPolicy(*p))
		}
	}
	return nil
}

// toMap is v's JSON encoding as a map (v encodes without error: plain numbers and strings).
func toMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}
