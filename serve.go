package tierbucket

import (
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/cost"
	"github.com/tierbucket/caddy-tierbucket/internal/response"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// ServeHTTP is the request path: app id → cost estimate → in-flight slot →
// tokens → next handler → settlement → slot released. Everything on it is local: no Store
// call (unless the local tokens are spent), no lock held across I/O.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	s := h.state
	o := response.Result{App: h.appID(r, repl)}

	if !limiter.ValidAppID(o.App) {
		s.InvalidAppID()
		return h.refuse(w, r, repl, next, &o, store.ReasonInvalidAppID)
	}
	app, reason := s.Limiter().App(o.App)
	if app == nil {
		if reason == store.ReasonNone {
			reason = store.ReasonUnknownApp
		}
		s.UnknownApp()
		return h.refuse(w, r, repl, next, &o, reason)
	}

	// Filled in place as the request goes: an admitted request's state is passed on by pointer.
	a := admission{app: app, repl: repl, est: h.model.Estimate(r)}
	o.Cost = a.est.Cost
	pol := app.Policy()
	o.Limit, o.Guaranteed = max(int64(pol.Burst), 1), pol.Guaranteed
	if pol.Disabled { // before the in-flight slot, so that a full app still says why
		app.Record(store.ReasonAppDisabled, a.est.Cost)
		return h.refuse(w, r, repl, next, &o, store.ReasonAppDisabled)
	}

	conns := s.Connections()
	a.ticket, reason = conns.Acquire(app.Label(), pol.MaxConnections)
	if reason != store.ReasonNone {
		app.Record(reason, a.est.Cost)
		o.Remaining = app.Remaining() // tokens are left: the connections ran out
		if reason == store.ReasonClusterLimitExceeded {
			o.ConnLimit, o.ConnCurrent = conns.Limits("", 0) // the cluster's figures
		} else {
			o.ConnLimit, o.ConnCurrent = conns.Limits(app.Label(), pol.MaxConnections)
		}
		return h.refuse(w, r, repl, next, &o, reason) // shadow: let through, nothing taken
	}

	// Up front a request is charged at most the app's burst; a body that costs more is charged
	// as it arrives (touchingBody). Charged in full before a byte came, a declared size that
	// nobody sends (Content-Length 10^18) would block the app, for as long as the lying client
	// keeps the request open, behind a debt of cost.max.
	a.charge = min(a.est.Cost, o.Limit)
	a.d = app.Take(r.Context(), a.charge, h.maxWait)
	o.Remaining, o.RetryAfter = a.d.Remaining, a.d.RetryAfter
	if a.d.Limit > 0 {
		o.Limit = a.d.Limit
	}
	if !a.d.Allowed {
		app.Record(a.d.Reason, a.est.Cost)
		if h.Shadow {
			defer a.ticket.Release() // shadow: let through with its slot; no tokens to settle
		} else {
			a.ticket.Release() // rollback: the slot was taken for a request that does not run
		}
		return h.refuse(w, r, repl, next, &o, a.d.Reason)
	}

	o.Decision = response.Allowed
	a.out = h.style.Publish(w, placeholders(repl), &o)
	return h.serveAdmitted(w, r, next, &a)
}

// admission is what an admitted request holds while the rest of the chain runs and settles
// when it returns. It lives on the handler's stack: one pointer is passed and deferred instead
// of a dozen values.
type admission struct {
	app    *limiter.App
	d      limiter.Decision
	est    cost.Estimate
	charge int64 // what was taken up front
	ticket *connlimit.Ticket
	repl   *caddy.Replacer
	out    *response.Outcome // the placeholders' record (nil: none)

	tw    *response.TrackedWriter
	body  *touchingBody // nil: no body to count
	orig  io.ReadCloser // the request's own body, put back at the end
	start time.Time     // when the request was admitted, for the adaptive capacity (zero: not timed)
}

// serveAdmitted runs the rest of the chain for an admitted request and settles afterwards.
// The deferred part runs on panics too: the slot is released exactly once (or, for a hijacked
// connection, when that connection is closed) and the cost is settled.
//
// Rollback: when the request is rejected later in the chain with 429 before it reached the
// backend — by another rate limiter after this one, written as a response or returned as a
// Caddy error — everything it took is given back. A 429 the backend answered through
// reverse_proxy is not a rejection in the chain but the backend throttling: the request
// reached it and stays charged (refunded, every throttled request would be free exactly when
// the backend is overloaded). Any other outcome, errors included, stays charged too (only the
// unread part of a declared body is refunded, as for every request): the request was admitted
// and usually reached the backend, and refunding downstream rejections such as a 401 from
// basic_auth would make brute force free.
func (h *Handler) serveAdmitted(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, a *admission) (err error) {
	a.tw = response.Track(w, a.ticket, a.out)
	if h.throttle != nil {
		a.start = time.Now()
		a.tw.TimeHeaders(a.start)
	}
	a.orig = r.Body
	// Content-Length 0 (a GET over HTTP/1.1 or 2) has nothing to count; Caddy wraps every
	// request's body, so NoBody alone would not tell it, and this saves an allocation per GET.
	if a.orig != nil && a.orig != http.NoBody && r.ContentLength != 0 {
		// Not pooled: a proxy transport may still close the body after the chain returns.
		a.body = &touchingBody{ticket: a.ticket.Handle(), app: a.app, model: h.model, est: a.est}
		a.body.charged.Store(a.charge)
		a.body.Reset(a.orig)
		a.body.CountObjects(a.est)
		r.Body = a.body
	}
	defer h.settle(r, a, &err)
	return next.ServeHTTP(a.tw, r)
}

// settle ends an admitted request when the rest of the chain has returned (or panicked): it
// rolls back or settles its cost, records it, and releases its slot and writer. err is the
// chain's error.
func (h *Handler) settle(r *http.Request, a *admission, err *error) {
	r.Body = a.orig
	tw, app := a.tw, a.app
	charged := a.charge
	if a.body != nil {
		charged = a.body.settle()
	}
	status := tw.Status()
	if status == 0 {
		status = errorStatus(*err)
	}
	if status == http.StatusTooManyRequests && !backendAnswered(a.repl) {
		app.Settle(a.d, charged, 0) // rejected further down: roll back
		app.Record(store.ReasonNone, 0)
	} else {
		if h.throttle != nil {
			h.observe(app, tw, a.repl, status, a.start)
		}
		var used cost.Usage
		if a.body != nil {
			used = a.body.Usage()
		}
		used.ResponseBytes = tw.Written()
		actual := h.model.Settle(a.est, used)
		app.Settle(a.d, charged, actual)
		app.Record(store.ReasonNone, actual)
		if a.out != nil {
			a.out.Cost = actual // {http.rate_limit.cost} in access logs: what the request cost
		}
	}
	if !tw.Hijacked() {
		a.ticket.Release()
	}
	tw.Done()
}

// observe feeds the backend's answer to an admitted request to the adaptive capacity's
// signals: its time to response headers (to the end of the request when no status was
// written) and whether it is a throttle, that is a throttle_status the backend answered (a
// handler other than reverse_proxy answering one, such as a later limiter in `format s3`, is
// not the backend). repl is looked up for throttle statuses only.
func (h *Handler) observe(app *limiter.App, tw *response.TrackedWriter, repl *caddy.Replacer, status int, start time.Time) {
	latency := tw.HeaderLatency()
	if latency == 0 {
		latency = time.Since(start)
	}
	app.Observe(latency, h.throttle.has(status) && (repl == nil || backendAnswered(repl)))
}

// throttleSet is a set of 4xx and 5xx statuses (adaptive.throttle_status).
type throttleSet [4]uint64

func newThrottleSet(statuses []int) *throttleSet {
	var s throttleSet
	for _, st := range statuses {
		if i := st - 400; i >= 0 && i < 200 {
			s[i/64] |= 1 << (i % 64)
		}
	}
	return &s
}

// has reports whether status is in the set.
func (s *throttleSet) has(status int) bool {
	i := status - 400
	return i >= 0 && i < 200 && s[i/64]&(1<<(i%64)) != 0
}

// backendAnswered reports whether reverse_proxy received a response from a backend for this
// request: it sets {http.reverse_proxy.status_code} once an upstream answered, and no handler
// before it in the chain does. Looked up only for a 429 or a throttle status, off the path of
// every other request.
func backendAnswered(repl *caddy.Replacer) bool {
	if repl == nil {
		return false
	}
	_, ok := repl.Get(proxyStatusPlaceholder)
	return ok
}

// proxyStatusPlaceholder is the placeholder reverse_proxy sets to the status of the backend's
// response.
const proxyStatusPlaceholder = "http.reverse_proxy.status_code"

// errorStatus is the HTTP status of a Caddy handler error (0 for nil or other errors).
func errorStatus(err error) int {
	if err == nil {
		return 0
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		return he.StatusCode
	}
	return 0
}

// touchingBody counts the request body's bytes (cost.CountingBody), marks the in-flight slot
// active on every read, so a long upload is not swept as a leak, and charges the bytes read
// beyond what the request was charged so far: a body costing more than the app's burst, or a
// streaming body beyond its estimate, is charged as it arrives.
type touchingBody struct {
	cost.CountingBody
	ticket connlimit.Handle

	app     *limiter.App
	model   *cost.Model
	est     cost.Estimate
	charged atomic.Int64 // what the request was charged so far; -1 once settled
}

// Read reads from the body, counts, marks activity and charges what the bytes cost.
func (b *touchingBody) Read(p []byte) (int, error) {
	b.ticket.Touch()
	n, err := b.CountingBody.Read(p)
	if n > 0 {
		b.chargeRead()
	}
	return n, err
}

// chargeRead charges what the bytes read so far cost beyond what was charged. The transport
// may read on another goroutine while the request settles: after settle nothing more is
// charged, and a charge raced past it is part of what settle returned.
func (b *touchingBody) chargeRead() {
	c := b.model.Settle(b.est, b.Usage())
	for {
		cur := b.charged.Load()
		if cur < 0 || c <= cur {
			return
		}
		if b.charged.CompareAndSwap(cur, c) {
			b.app.Charge(c - cur)
			return
		}
	}
}

// settle ends the charging and returns what the request was charged in all.
func (b *touchingBody) settle() int64 { return b.charged.Swap(-1) }

// refuse answers a rejected request: headers, placeholders, the event, then the body (or a
// Caddy error for handle_errors when `errors` is set). In shadow mode the request is let
// through (nothing was taken).
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer,
	next caddyhttp.Handler, o *response.Result, reason store.Reason,
) error {
	o.Reason = reason
	o.Decision = response.Rejected
	if h.Shadow {
		o.Decision = response.ShadowRejected
	}
	out := h.style.Publish(w, placeholders(repl), o)
	h.emit(o)
	if h.Shadow {
		if out == nil || repl == nil {
			return next.ServeHTTP(w, r)
		}
		// wrapped so that a later rate_limit handler's outcome reaches the placeholders
		tw := response.Track(w, nil, out)
		defer tw.Done()
		return next.ServeHTTP(tw, r)
	}
	if out == nil {
		out = h.style.NewOutcome(o)
	}
	err := h.style.Reject(w, r, out, h.Errors)
	if re, ok := err.(*response.RejectionError); ok {
		return caddyhttp.Error(re.Status, re) // for handle_errors
	}
	return err
}

// replacer is Caddy's replacer as the response package registers placeholders with it.
type replacer caddy.Replacer

func (r *replacer) Provide(provide func(key string) (any, bool)) { (*caddy.Replacer)(r).Map(provide) }

// placeholders is repl as a response.Placeholders (nil: none).
func placeholders(repl *caddy.Replacer) response.Placeholders {
	if repl == nil {
		return nil
	}
	return (*replacer)(repl)
}

// emit sends the rate_limit_exceeded event; building it is skipped when nothing listens.
func (h *Handler) emit(o *response.Result) {
	if h.events == nil || !h.events.ShouldEmit(eventName) {
		return
	}
	h.events.Emit(h.ctx, eventName, map[string]any{
		"cluster": h.state.ID(),
		"app":     o.App,
		"reason":  o.Reason.String(),
		"cost":    o.Cost,
		"shadow":  h.Shadow,
	})
}

// eventName is the event emitted on every rejection.
const eventName = "rate_limit_exceeded"

// keyMode is how ServeHTTP computes the app id.
type keyMode uint8

const (
	keyHost        keyMode = iota // {http.request.host}: r.Host without the port, no allocation
	keyHeader                     // {http.request.header.X}: r.Header.Get, no allocation
	keyLiteral                    // no placeholder at all
	keyPlaceholder                // anything else: the replacer
)

// parseKey recognises the key templates ServeHTTP can evaluate without the replacer.
func parseKey(key string) (keyMode, string) {
	switch {
	case key == "{http.request.host}":
		return keyHost, ""
	case strings.HasPrefix(key, "{http.request.header.") && strings.HasSuffix(key, "}") &&
		strings.Count(key, "{") == 1:
		name := key[len("{http.request.header.") : len(key)-1]
		if name != "" {
			return keyHeader, textproto.CanonicalMIMEHeaderKey(name)
		}
	case !strings.Contains(key, "{"):
		return keyLiteral, ""
	}
	return keyPlaceholder, ""
}

// appID evaluates the key for r. The fast paths do not allocate: r.Host and header values are
// strings the request already holds.
func (h *Handler) appID(r *http.Request, repl *caddy.Replacer) string {
	switch h.key {
	case keyHost:
		return hostOnly(r.Host)
	case keyHeader:
		if v := r.Header[h.keyHdr]; len(v) > 0 {
			return v[0]
		}
		return ""
	case keyLiteral:
		return h.Key
	default: // keyPlaceholder
		if repl == nil {
			return ""
		}
		return repl.ReplaceKnown(h.Key, "")
	}
}

// hostOnly strips the port from a Host header value, like {http.request.host} does, without
// allocating. IPv6 literals lose their brackets.
func hostOnly(host string) string {
	if host == "" {
		return ""
	}
	if host[0] == '[' {
		if i := strings.IndexByte(host, ']'); i > 0 {
			return host[1:i]
		}
		return host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host, ':') == i {
		return host[:i]
	}
	return host
}
