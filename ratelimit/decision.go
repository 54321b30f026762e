package ratelimit

import (
	"errors"
	"time"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Decision is the answer to Allow, AllowN and Acquire.
type Decision struct {
	// Allowed: the caller may proceed (for AllowN, the cost was taken).
	Allowed bool
	// Remaining is about how many tokens the app has left: this instance's plus what the
	// shared bucket held at its last lease (for Acquire, the free in-flight slots).
	Remaining int64
	// RetryAfter is, when refused, when tokens are expected again (at least 1ms).
	RetryAfter time.Duration
	// Reason is why not ("" when allowed).
	Reason Reason
	// Limit is the app's burst (for Acquire, the in-flight limit that refused).
	Limit int64
	// Err is set for a misuse, which is never allowed: an invalid key (ErrInvalidKey, with
	// ReasonInvalidAppID), a cost <= 0 (ErrInvalidCost) or a closed or nil Limiter (ErrClosed).
	Err error
}

// Reason is why a decision refused; the values are the reasons of the Caddy plugin's 429
// bodies, metrics and admin API.
type Reason string

// The reasons.
const (
	ReasonAppExhausted           Reason = "app_exhausted"            // the app's bucket is empty
	ReasonClusterExhausted       Reason = "cluster_exhausted"        // the cluster is overloaded, or its borrow pool empty
	ReasonEmergencyBlocked       Reason = "emergency_blocked"        // the app's priority gets nothing in the emergency
	ReasonEmergencyQuotaExceeded Reason = "emergency_quota_exceeded" // the app's reduced emergency quota is spent
	ReasonBorrowLimitExceeded    Reason = "borrow_limit_exceeded"    // the app borrowed max_borrow already
	ReasonAppLimitExceeded       Reason = "app_limit_exceeded"       // the app's in-flight limit
	ReasonClusterLimitExceeded   Reason = "cluster_limit_exceeded"   // the cluster's in-flight limit
	ReasonUnknownApp             Reason = "unknown_app"              // no policy for the key, and UnknownReject
	ReasonInvalidAppID           Reason = "invalid_app_id"           // the key is not 1-128 characters of [A-Za-z0-9._:-]
	ReasonRedisUnavailable       Reason = "redis_unavailable"        // the Store is down and FailClosed is in force
	ReasonAppDisabled            Reason = "app_disabled"             // the app is disabled (config or the admin API)
)

// The misuse errors (Decision.Err, and Wait's errors), for errors.Is.
var (
	// ErrInvalidKey: a key must be 1-128 characters of [A-Za-z0-9._:-], as an app id.
	ErrInvalidKey = errors.New("ratelimit: invalid key (1-128 characters of [A-Za-z0-9._:-])")
	// ErrInvalidCost: a cost must be > 0.
	ErrInvalidCost = errors.New("ratelimit: cost must be > 0")
	// ErrClosed: the Limiter was closed (or is nil).
	ErrClosed = errors.New("ratelimit: limiter closed")
	// ErrUnknownApp: Wait for a key that UnknownReject refuses for good.
	ErrUnknownApp = errors.New("ratelimit: unknown app (unknown_app reject)")
	// ErrAppDisabled: Wait for an app that is disabled; waiting does not enable it.
	ErrAppDisabled = errors.New("ratelimit: app disabled")
	// ErrMiddlewareArgs: Middleware was given a nil Limiter, key function or handler.
	ErrMiddlewareArgs = errors.New("ratelimit: Middleware needs a Limiter, a key function and a handler")
)

// reasonOf is the reason's name as the plugin writes it.
func reasonOf(r store.Reason) Reason { return Reason(r.String()) }

// decisionOf is the limiter's decision as the package shows it.
func decisionOf(d limiter.Decision) Decision {
	return Decision{
		Allowed:    d.Allowed,
		Remaining:  max(d.Remaining, 0),
		RetryAfter: d.RetryAfter,
		Reason:     reasonOf(d.Reason),
		Limit:      d.Limit,
	}
}

// misuse is the decision on a call that cannot be decided.
func misuse(err error, r store.Reason) Decision {
	return Decision{Err: err, Reason: reasonOf(r)}
}
