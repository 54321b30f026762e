package ratelimit

import (
	"net/http"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/internal/response"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Middleware limits the requests of next with lim, each costing one token of the app that key
// names (key(r), e.g. a header or the authenticated tenant). It answers as the Caddy plugin
// with its default options: a request with an invalid key is 400 invalid_app_id, an unknown
// app refused by UnknownReject 403 unknown_app, a refusal under FailClosed 503
// redis_unavailable, every other refusal 429, each with the plugin's JSON body
//
//	{"error":"rate_limit_exceeded","reason":"app_exhausted","retry_after":1,"remaining":0,"cost":1}
//
// and, for the token and in-flight refusals, the RateLimit, RateLimit-Policy and Retry-After
// headers; admitted responses get no header. Each request holds an in-flight slot of its app
// while next runs (Acquire's limits). A request that next itself answers with 429 (a limiter
// further down, or the backend's own) gets its token back, as in the plugin.
//
// A nil lim, key or next is a programming error: every request is then answered 500 with
// the error's text, and next is not called.
func Middleware(lim *Limiter, key func(*http.Request) string, next http.Handler) http.Handler {
	if lim == nil || key == nil || next == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, ErrMiddlewareArgs.Error(), http.StatusInternalServerError)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := response.Result{App: key(r), Cost: 1}
		app, d := lim.app(res.App, res.Cost)
		if app == nil {
			reason := store.ReasonUnknownApp
			if parsed, ok := store.ParseReason(string(d.Reason)); ok && parsed != store.ReasonNone {
				reason = parsed
			} else if d.Err != nil {
				reason = store.ReasonRedisUnavailable // a closed Limiter
			}
			refuse(w, r, &res, reason)
			return
		}
		pol := app.Policy()
		res.Limit, res.Guaranteed = max(int64(pol.Burst), 1), pol.Guaranteed

		ticket, reason := lim.conns.Acquire(app.Label(), pol.MaxConnections)
		if reason != store.ReasonNone {
			app.Record(reason, res.Cost)
			res.Remaining = app.Remaining()
			if reason == store.ReasonClusterLimitExceeded {
				res.ConnLimit, res.ConnCurrent = lim.conns.Limits("", 0)
			} else {
				res.ConnLimit, res.ConnCurrent = lim.conns.Limits(app.Label(), pol.MaxConnections)
			}
			refuse(w, r, &res, reason)
			return
		}
		ld := app.Take(r.Context(), res.Cost, 0)
		res.Remaining, res.RetryAfter = ld.Remaining, ld.RetryAfter
		if ld.Limit > 0 {
			res.Limit = ld.Limit
		}
		if !ld.Allowed {
			app.Record(ld.Reason, res.Cost)
			ticket.Release()
			refuse(w, r, &res, ld.Reason)
			return
		}
		serve(w, r, next, app, ld, res.Cost, ticket)
	})
}

// serve runs next for an admitted request and settles it, on panics too: a 429 from next
// gives the token back, anything else keeps it charged; the slot is released once (for a
// hijacked connection, when that connection closes).
func serve(w http.ResponseWriter, r *http.Request, next http.Handler, app *limiter.App, d limiter.Decision, cost int64, ticket *connlimit.Ticket) {
	slot := ticket.Handle()
	tw := response.Track(w, ticket, nil)
	defer func() {
		if tw.Status() == http.StatusTooManyRequests {
			app.Settle(d, cost, 0)
			app.Record(store.ReasonNone, 0)
		} else {
			app.Settle(d, cost, cost)
			app.Record(store.ReasonNone, cost)
		}
		if !tw.Hijacked() {
			slot.Release()
		}
		tw.Done()
	}()
	next.ServeHTTP(tw, r)
}

// refuse writes the plugin's rejection for reason (its default headers and JSON body).
func refuse(w http.ResponseWriter, r *http.Request, res *response.Result, reason store.Reason) {
	var style response.Style // the plugin's defaults: headers on rejections, JSON bodies
	res.Reason = reason
	res.Decision = response.Rejected
	out := style.Publish(w, nil, res)
	if out == nil {
		out = style.NewOutcome(res)
	}
	_ = style.Reject(w, r, out, false) // the client went away: nothing to do
}
