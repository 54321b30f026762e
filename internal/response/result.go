package response

import (
	"math"
	"time"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Decision is the {http.rate_limit.decision} placeholder's value.
type Decision uint8

const (
	Allowed        Decision = iota
	Rejected                // rejected (429/503/400/403)
	ShadowRejected          // shadow mode: would have been rejected, let through
)

var decisionNames = [...]string{"allowed", "rejected", "shadow_rejected"}

// String is the placeholder's value.
func (d Decision) String() string { return decisionNames[d] }

// Result is what one request's headers and placeholders show. It lives on the stack: the
// decision path itself does not allocate.
type Result struct {
	App         string
	Cost        int64
	Remaining   int64
	Limit       int64 // the app's burst
	Guaranteed  float64
	RetryAfter  time.Duration
	Reason      store.Reason
	Decision    Decision
	ConnLimit   int64 // in-flight rejections: the limit and the fleet-wide count
	ConnCurrent int64
}

// hasQuota reports whether there is an app whose quota the headers can describe.
func (r *Result) hasQuota() bool {
	return r.Reason != store.ReasonInvalidAppID && r.Reason != store.ReasonUnknownApp
}

// retryable reports whether the result is (or, in shadow mode, would have been) a rejection
// that tokens arriving later can cure, so Retry-After applies (not a disabled app: only an
// operator cures that).
func (r *Result) retryable() bool {
	return r.Reason != store.ReasonNone && r.Reason != store.ReasonAppDisabled && r.hasQuota()
}

// resetSeconds is the reset time of the headers in whole seconds: on a rejection when tokens
// come back (at least 1), otherwise how long the app's bucket takes to be full again.
func (r *Result) resetSeconds() int64 {
	if r.Decision != Allowed && r.Reason != store.ReasonNone {
		return retrySeconds(r.RetryAfter)
	}
	missing := r.Limit - r.Remaining
	if missing <= 0 || !(r.Guaranteed > 0) {
		return 0
	}
	return ceilSeconds(float64(missing) / r.Guaranteed)
}

// windowSeconds is the draft header's w: the time the bucket takes to fill from empty.
func (r *Result) windowSeconds() int64 {
	if !(r.Guaranteed > 0) {
		return 1
	}
	return max(ceilSeconds(float64(r.Limit)/r.Guaranteed), 1)
}

// ceilSeconds rounds s up to whole seconds, at most limiter.LongestWait (a year), the bound of
// a rejection's retry-after too: a rate so small that the figure overflows int64 (guaranteed
// 1e-20) must not come out negative.
func ceilSeconds(s float64) int64 {
	longest := limiter.LongestWait.Seconds()
	if !(s < longest) {
		return int64(longest)
	}
	return int64(math.Ceil(s))
}

// retrySeconds rounds a retry-after up to whole seconds, at least 1.
func retrySeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return max(s, 1)
}
