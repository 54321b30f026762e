package tierbucket

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// decision is the {http.rate_limit.decision} placeholder's value.
type decision uint8

const (
	decisionAllowed  decision = iota
	decisionRejected          // rejected (429/503/400/403)
	decisionShadow            // shadow mode: would have been rejected, let through
)

var decisionNames = [...]string{"allowed", "rejected", "shadow_rejected"}

// result is what one request's headers and placeholders show. It lives on the stack: the
// decision path itself does not allocate.
type result struct {
	app         string
	cost        int64
	remaining   int64
	limit       int64 // the app's burst
	guaranteed  float64
	retryAfter  time.Duration
	reason      store.Reason
	decision    decision
	connLimit   int64 // connection rejections: the limit and the fleet-wide count
	connCurrent int64
}

// outcome is a result published to the response headers and the replacer. It is the one
// allocation per request of the handler in Caddy, placeholder provider included (provider.go).
// It has to outlive ServeHTTP, because the response headers are written and access logs read
// the placeholders after the handler chain has returned, so it cannot be pooled. The header values
// are built into buf and handed out as strings that point into it (buf is never written again
// once a value is cut from it), so the headers cost no further allocation.
//
// vals and buf are the room for header values, in the same allocation (newOutcome): their
// length is what is used, their capacity what there is.
type outcome struct {
	self providerHeader // first: the outcome is its own placeholder provider (provider.go)
	result
	// root is the outcome whose placeholder provider the request's replacer holds: this one,
	// or that of an earlier rate_limit handler in the same chain. latest (on the root only) is
	// the outcome of the last handler that published, which the placeholders show.
	root   *outcome
	latest atomic.Pointer[outcome]
	vals   []string
	buf    []byte
}

// outcomeOne has room for the one header value of an admitted request with `headers draft`
// (RateLimit: "app";r=<remaining>;t=<reset>, under 40 bytes for a burst below 10^17).
// The request path allocates it for every admitted request, so it is kept small: each byte
// of it is a byte the allocator clears and the garbage collector later reclaims, and the
// cache lines it touches cost most in Caddy (docs/performance.md, "Cache misses").
type outcomeOne struct {
	outcome
	valRoom [1]string
	bufRoom [40]byte
}

// outcomeMany has room for every header value of a rejection, and of every response with the
// legacy headers.
type outcomeMany struct {
	outcome
	valRoom [8]string
	bufRoom [128]byte
}

// newOutcome allocates the outcome of res, with room for the header values its response gets
// from h: none for an admitted request with the default headers or the headers off, one with
// `headers draft`, more otherwise. A value beyond the room is allocated on its own (value).
func (h *Handler) newOutcome(res *result) *outcome {
	switch {
	case res.decision == decisionAllowed && !h.headersOnAdmitted():
		return &outcome{result: *res}
	case res.decision == decisionAllowed && h.headers == headersDraft:
		t := &outcomeOne{outcome: outcome{result: *res}}
		t.vals, t.buf = t.valRoom[:0], t.bufRoom[:0]
		return &t.outcome
	}
	t := &outcomeMany{outcome: outcome{result: *res}}
	t.vals, t.buf = t.valRoom[:0], t.bufRoom[:0]
	return &t.outcome
}

// publish sets the headers and placeholders of res and returns the outcome that holds them
// (nil, and no allocation, when there is neither a header to write nor a replacer). w is the
// writer the handler was given: when an earlier rate_limit handler of the chain wrapped it,
// that handler's provider is pointed at this outcome instead of registering a second one.
func (h *Handler) publish(w http.ResponseWriter, repl *caddy.Replacer, res *result) *outcome {
	if repl == nil && (!res.hasQuota() || h.headers == headersOff ||
		(res.decision == decisionAllowed && !h.headersOnAdmitted())) {
		return nil
	}
	o := h.newOutcome(res)
	h.setHeaders(w, o)
	if repl != nil {
		if root := publishedOutcome(w); root != nil {
			o.root = root
			root.latest.Store(o)
		} else {
			o.root = o
			repl.Map(o.provider())
		}
	}
	return o
}

// headersOnAdmitted reports whether admitted responses carry rate-limit headers: not by
// default, where they go on rejections only (docs/performance.md, "The header defaults").
func (h *Handler) headersOnAdmitted() bool {
	return h.headers != headersRejections && h.headers != headersOff
}

// hasQuota reports whether there is an app whose quota the headers can describe.
func (r *result) hasQuota() bool {
	return r.reason != store.ReasonInvalidAppID && r.reason != store.ReasonUnknownApp
}

// value appends one header value built by build to buf and returns it as a one-element slice
// (cap 1, so that a later Header().Add copies instead of writing into vals).
func (o *outcome) value(build func(b []byte) []byte) []string {
	room := o.buf[len(o.buf):cap(o.buf)]
	b := build(room[:0])
	var s string
	if len(b) > 0 && len(room) > 0 && unsafe.SliceData(b) == unsafe.SliceData(room) {
		s = unsafe.String(unsafe.SliceData(b), len(b)) // built in place
		o.buf = o.buf[:len(o.buf)+len(b)]              // fits: len(b) <= len(room)
	} else {
		s = string(b) // did not fit: append moved it elsewhere
	}
	if len(o.vals) == cap(o.vals) {
		return []string{s} // more values than planned for: allocate rather than fail
	}
	o.vals = append(o.vals, s) // within the room: no allocation
	n := len(o.vals)
	return o.vals[n-1 : n : n]
}

// resetSeconds is the reset time of the headers in whole seconds: on a rejection when tokens
// come back (at least 1), otherwise how long the app's bucket takes to be full again.
func (o *result) resetSeconds() int64 {
	if o.decision != decisionAllowed && o.reason != store.ReasonNone {
		return retrySeconds(o.retryAfter)
	}
	missing := o.limit - o.remaining
	if missing <= 0 || !(o.guaranteed > 0) {
		return 0
	}
	return ceilSeconds(float64(missing) / o.guaranteed)
}

// ceilSeconds rounds s up to whole seconds, at most limiter.LongestWait (a year), the bound of
// a rejection's retry-after too: a rate so small that the figure overflows int64 (guaranteed
// 1e-20) must not come out negative, shown as 1.
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

// windowSeconds is the draft header's w: the time the bucket takes to fill from empty.
func (o *result) windowSeconds() int64 {
	if !(o.guaranteed > 0) {
		return 1
	}
	return max(ceilSeconds(float64(o.limit)/o.guaranteed), 1)
}

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

// rejected reports whether the outcome is (or, in shadow mode, would have been) a rejection
// that tokens arriving later can cure, so Retry-After applies.
func (o *result) rejected() bool {
	return o.reason != store.ReasonNone && o.reason != store.ReasonInvalidAppID &&
		o.reason != store.ReasonUnknownApp
}

// setHeaders writes the rate-limit headers of the configured mode.
func (h *Handler) setHeaders(w http.ResponseWriter, o *outcome) {
	if h.headers == headersOff || !o.hasQuota() {
		return // no app, no quota to describe
	}
	if !o.rejected() && !h.headersOnAdmitted() {
		return // the default: rejections only
	}
	hdr := w.Header()
	reset := o.resetSeconds()
	remaining := max(o.remaining, 0)
	if h.headers == headersLegacy || h.headers == headersBoth {
		hdr[hdrCost] = o.value(func(b []byte) []byte { return strconv.AppendInt(b, o.cost, 10) })
		hdr[hdrRemaining] = o.value(func(b []byte) []byte { return strconv.AppendInt(b, remaining, 10) })
		hdr[hdrReset] = o.value(func(b []byte) []byte {
			return strconv.AppendInt(b, time.Now().Unix()+reset, 10)
		})
		if o.connLimit > 0 {
			hdr[hdrConnLimit] = o.value(func(b []byte) []byte { return strconv.AppendInt(b, o.connLimit, 10) })
			hdr[hdrConnCurrent] = o.value(func(b []byte) []byte { return strconv.AppendInt(b, o.connCurrent, 10) })
			hdr[hdrConnRemain] = o.value(func(b []byte) []byte {
				return strconv.AppendInt(b, max(o.connLimit-o.connCurrent, 0), 10)
			})
		}
	}
	draft := h.headers == headersDraft || h.headers == headersRejections
	if h.headers == headersBoth || (draft && o.rejected()) {
		// draft: the policy is static, so it goes on rejections only; every response carries
		// RateLimit (remaining and reset), one field. rejections: both, on rejections only.
		hdr[hdrPolicy] = o.value(func(b []byte) []byte {
			b = append(b, `"app";q=`...)
			b = strconv.AppendInt(b, o.limit, 10)
			b = append(b, ";w="...)
			return strconv.AppendInt(b, o.windowSeconds(), 10)
		})
	}
	if draft || h.headers == headersBoth {
		hdr[hdrRateLimit] = o.value(func(b []byte) []byte {
			b = append(b, `"app";r=`...)
			b = strconv.AppendInt(b, remaining, 10)
			b = append(b, ";t="...)
			return strconv.AppendInt(b, reset, 10)
		})
	}
	if o.rejected() {
		hdr[hdrRetryAfter] = o.value(func(b []byte) []byte { return strconv.AppendInt(b, reset, 10) })
	}
}

// writeRejection writes the JSON body of a rejection:
// {"error":"rate_limit_exceeded","reason":"app_exhausted","retry_after":1,"remaining":0,"cost":17}
func writeRejection(w http.ResponseWriter, r *http.Request, status int, o *outcome) error {
	var retry int64
	if o.rejected() {
		retry = retrySeconds(o.retryAfter)
	}
	bp := bodyPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `{"error":"rate_limit_exceeded","reason":"`...)
	b = append(b, o.reason.String()...) // reason names are plain ASCII, no escaping needed
	b = append(b, `","retry_after":`...)
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, max(o.remaining, 0), 10)
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, o.cost, 10)
	b = append(b, "}\n"...)
	// The values live in the request's outcome, never in shared slices: a later handler (a
	// deferred `header` replace) may rewrite header values in place.
	hdr := w.Header()
	hdr["Content-Type"] = o.value(func(b []byte) []byte { return append(b, "application/json"...) })
	hdr["X-Content-Type-Options"] = o.value(func(b []byte) []byte { return append(b, "nosniff"...) })
	// No Content-Length: net/http sets it for a body written in one piece by a handler.
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		*bp = b
		bodyPool.Put(bp)
		return nil // a HEAD response has no body
	}
	_, err := w.Write(b) // Write copies b (ResponseWriter contract), so it can go back to the pool
	*bp = b
	bodyPool.Put(bp)
	return err
}

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 160); return &b }}

// The placeholders for later handlers and logs, {http.rate_limit.app}, .cost, .remaining,
// .reason and .decision. They cost nothing unless used: one provider function per request
// (repl.Map, no map entries; the outcome itself, provider.go), whose values are built only
// when a placeholder is looked up.
const phPrefix = "http.rate_limit."

// placeholder is the replacer provider of a request's outcome (the root of its chain).
func (o *outcome) placeholder(key string) (any, bool) {
	if len(key) <= len(phPrefix) || key[:len(phPrefix)] != phPrefix {
		return nil, false
	}
	if l := o.latest.Load(); l != nil {
		o = l
	}
	switch key[len(phPrefix):] {
	case "app":
		return o.app, true
	case "cost":
		return strconv.FormatInt(o.cost, 10), true
	case "remaining":
		return strconv.FormatInt(max(o.remaining, 0), 10), true
	case "reason":
		return o.reason.String(), true
	case "decision":
		return decisionNames[o.decision], true
	}
	return nil, false
}

// publishedOutcome finds the root outcome of an earlier rate_limit handler of the same chain:
// its writer wraps w, possibly under other handlers' wrappers.
func publishedOutcome(w http.ResponseWriter) *outcome {
	for range 16 {
		switch ww := w.(type) {
		case *trackedWriter:
			if ww.out != nil {
				return ww.out
			}
			w = ww.ResponseWriter
		case interface{ Unwrap() http.ResponseWriter }:
			w = ww.Unwrap()
		default:
			return nil
		}
	}
	return nil
}
