package response

import (
	"net/http"
	"strconv"
	"sync/atomic"
)

// Outcome is a Result published to the response headers and the replacer: the one record a
// request allocates in the handler (besides the placeholder function the replacer holds, and
// the one string that holds the request's header values).
type Outcome struct {
	Result
	// root is the outcome whose placeholder function the request's replacer holds: this one,
	// or that of an earlier rate_limit handler in the same chain. latest (on the root only) is
	// the outcome of the last handler that published, which the placeholders show.
	root   *Outcome
	latest atomic.Pointer[Outcome]
	// vals is the room for the header map's value slices: its capacity is what the response's
	// style needs (NewOutcome), so setting the headers does not allocate a slice per field.
	vals []string
}

// outcomeOne has room for the one header field of an admitted request with `headers draft`.
type outcomeOne struct {
	Outcome
	room [1]string
}

// outcomeMany has room for every header field of a rejection, and of every response with the
// legacy headers.
type outcomeMany struct {
	Outcome
	room [maxFields]string
}

// NewOutcome allocates the outcome of res, with room for the header fields its response gets
// in style s: none for an admitted request with the default headers or the headers off, one
// with `headers draft`, more otherwise.
func (s Style) NewOutcome(res *Result) *Outcome {
	switch {
	case res.Decision == Allowed && !s.onAdmitted():
		return &Outcome{Result: *res}
	case res.Decision == Allowed && s.Headers == HeadersDraft:
		t := &outcomeOne{Outcome: Outcome{Result: *res}}
		t.vals = t.room[:0]
		return &t.Outcome
	}
	t := &outcomeMany{Outcome: Outcome{Result: *res}}
	t.vals = t.room[:0]
	return &t.Outcome
}

// Publish sets the headers and placeholders of res and returns the outcome that holds them
// (nil, and no allocation, when there is neither a header to write nor a replacer). w is the
// writer the handler was given: when an earlier rate_limit handler of the chain wrapped it,
// that handler's placeholder function is pointed at this outcome instead of registering a
// second one.
func (s Style) Publish(w http.ResponseWriter, repl Placeholders, res *Result) *Outcome {
	if repl == nil && (!res.hasQuota() || s.Headers == HeadersOff ||
		(res.Decision == Allowed && !s.onAdmitted())) {
		return nil
	}
	o := s.NewOutcome(res)
	if s.writesHeaders(res) { // w.Header() passes through every wrapper of the chain
		s.setHeaders(w.Header(), o)
	}
	if repl != nil {
		if root := publishedOutcome(w); root != nil {
			o.root = root
			root.latest.Store(o)
		} else {
			o.root = o
			repl.Provide(o.placeholder)
		}
	}
	return o
}

// Placeholders is where a request's placeholders are registered (Caddy's replacer): provide
// answers the keys it knows, and false for the others.
type Placeholders interface {
	Provide(provide func(key string) (any, bool))
}

// The placeholders for later handlers and logs: {http.rate_limit.app}, .cost, .remaining,
// .reason and .decision. Their values are built only when a placeholder is looked up.
const phPrefix = "http.rate_limit."

// placeholder is the replacer's value provider of a request's outcome (the root of its chain).
func (o *Outcome) placeholder(key string) (any, bool) {
	if len(key) <= len(phPrefix) || key[:len(phPrefix)] != phPrefix {
		return nil, false
	}
	if l := o.latest.Load(); l != nil {
		o = l
	}
	switch key[len(phPrefix):] {
	case "app":
		return o.App, true
	case "cost":
		return strconv.FormatInt(o.Cost, 10), true
	case "remaining":
		return strconv.FormatInt(max(o.Remaining, 0), 10), true
	case "reason":
		return o.Reason.String(), true
	case "decision":
		return o.Decision.String(), true
	}
	return nil, false
}

// publishedOutcome finds the root outcome of an earlier rate_limit handler of the same chain:
// its writer wraps w, possibly under other handlers' wrappers.
func publishedOutcome(w http.ResponseWriter) *Outcome {
	for range 16 {
		switch ww := w.(type) {
		case *TrackedWriter:
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
