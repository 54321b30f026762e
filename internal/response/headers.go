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

// setHeaders writes the rate-limit headers of s's mode for o.
func (s Style) setHeaders(hdr http.Header, o *Outcome) {
	if s.Headers == HeadersOff || !o.hasQuota() {
		return // no app, no quota to describe
	}
	if !o.retryable() && !s.onAdmitted() {
		return // the default: rejections only
	}
	var room [160]byte
	f := newFields(room[:])
	reset := o.resetSeconds()
	remaining := max(o.Remaining, 0)
	if s.Headers == HeadersLegacy || s.Headers == HeadersBoth {
		f.b = strconv.AppendInt(f.b, o.Cost, 10)
		f.built(hdrCost)
		f.b = strconv.AppendInt(f.b, remaining, 10)
		f.built(hdrRemaining)
		f.b = strconv.AppendInt(f.b, time.Now().Unix()+reset, 10)
		f.built(hdrReset)
		if o.ConnLimit > 0 {
			f.b = strconv.AppendInt(f.b, o.ConnLimit, 10)
			f.built(hdrConnLimit)
			f.b = strconv.AppendInt(f.b, o.ConnCurrent, 10)
			f.built(hdrConnCurrent)
			f.b = strconv.AppendInt(f.b, max(o.ConnLimit-o.ConnCurrent, 0), 10)
			f.built(hdrConnRemain)
		}
	}
	draft := s.Headers == HeadersDraft || s.Headers == HeadersRejections
	if s.Headers == HeadersBoth || (draft && o.retryable()) {
		// draft: the policy is static, so it goes on rejections only; every response carries
		// RateLimit (remaining and reset), one field. rejections: both, on rejections only.
		f.b = append(f.b, `"app";q=`...)
		f.b = strconv.AppendInt(f.b, o.Limit, 10)
		f.b = append(f.b, ";w="...)
		f.b = strconv.AppendInt(f.b, o.windowSeconds(), 10)
		f.built(hdrPolicy)
	}
	if draft || s.Headers == HeadersBoth {
		f.b = append(f.b, `"app";r=`...)
		f.b = strconv.AppendInt(f.b, remaining, 10)
		f.b = append(f.b, ";t="...)
		f.b = strconv.AppendInt(f.b, reset, 10)
		f.built(hdrRateLimit)
	}
	if o.retryable() {
		f.b = strconv.AppendInt(f.b, reset, 10)
		f.built(hdrRetryAfter)
	}
	f.set(hdr, o)
}
