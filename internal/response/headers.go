package response

import (
	"net/http"
	"strconv"
	"time"
)

// Canonical header names, set straight into the header map (no canonicalisation per request).
const (
	hdrCost        = "X-Ratelimit-Cost"
	hdrRemaining   = "X-Ratelimit-Remaining"
	hdrReset       = "X-Ratelimit-Reset"
	hdrRetryAfter  = "Retry-After"
	hdrPolicy      = "Ratelimit-Policy"
	hdrRateLimit   = "Ratelimit"
	hdrConnLimit   = "X-Connection-Limit"
	hdrConnCurrent = "X-Connection-Current"
	hdrConnRemain  = "X-Connection-Remaining"
)

// writesHeaders reports whether s's mode gives res any rate-limit header: not without an app
// (no quota to describe), and by default on rejections only.
func (s Style) writesHeaders(res *Result) bool {
	return s.Headers != HeadersOff && res.hasQuota() && (res.retryable() || s.onAdmitted())
}

// setHeaders writes the rate-limit headers of s's mode for o.
func (s Style) setHeaders(hdr http.Header, o *Outcome) {
	if !s.writesHeaders(&o.Result) {
		return
	}
	var room [160]byte
	var f fields
	b := room[:0]
	reset := o.resetSeconds()
	remaining := max(o.Remaining, 0)
	if s.Headers == HeadersLegacy || s.Headers == HeadersBoth {
		b = strconv.AppendInt(b, o.Cost, 10)
		f.built(hdrCost, len(b))
		b = strconv.AppendInt(b, remaining, 10)
		f.built(hdrRemaining, len(b))
		b = strconv.AppendInt(b, time.Now().Unix()+reset, 10)
		f.built(hdrReset, len(b))
		if o.ConnLimit > 0 {
			b = strconv.AppendInt(b, o.ConnLimit, 10)
			f.built(hdrConnLimit, len(b))
			b = strconv.AppendInt(b, o.ConnCurrent, 10)
			f.built(hdrConnCurrent, len(b))
			b = strconv.AppendInt(b, max(o.ConnLimit-o.ConnCurrent, 0), 10)
			f.built(hdrConnRemain, len(b))
		}
	}
	draft := s.Headers == HeadersDraft || s.Headers == HeadersRejections
	if s.Headers == HeadersBoth || (draft && o.retryable()) {
		// draft: the policy is static, so it goes on rejections only; every response carries
		// RateLimit (remaining and reset), one field. rejections: both, on rejections only.
		b = append(b, `"app";q=`...)
		b = strconv.AppendInt(b, o.Limit, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, o.windowSeconds(), 10)
		f.built(hdrPolicy, len(b))
	}
	if draft || s.Headers == HeadersBoth {
		b = append(b, `"app";r=`...)
		b = strconv.AppendInt(b, remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, reset, 10)
		f.built(hdrRateLimit, len(b))
	}
	if o.retryable() {
		b = strconv.AppendInt(b, reset, 10)
		f.built(hdrRetryAfter, len(b))
	}
	f.set(hdr, o, b)
}
