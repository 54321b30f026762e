package admin

import (
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"
)

// Site is the API as a site serves it beside the console (package siteconsole): the same
// routes below /rate_limit/, with changes refused (403) unless allowed, and GET /rate_limit/
// telling the console which (read_only) so that it hides its editing controls.
type Site struct {
	mux *http.ServeMux
}

// NewSite is the API for a site handler provisioned in ctx. Its streams end when stop is
// closed (the site's server begins to shut down) or ctx is done (its config is unloaded), so
// that an open console never holds a reload or Caddy's stop.
func NewSite(ctx caddy.Context, allowChanges bool, stop <-chan struct{}) (*Site, error) {
	a := API{readOnly: !allowChanges, stop: stop}
	if err := a.Provision(ctx); err != nil {
		return nil, err
	}
	return &Site{mux: a.mux()}, nil
}

// ServeHTTP answers r, whose path is below /rate_limit/, and writes an error as Caddy's admin
// endpoint does: the status and {"error": "…"}.
func (s *Site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := serve(s.mux, w, r)
	if err == nil {
		return
	}
	status, msg := http.StatusInternalServerError, err.Error()
	var ae caddy.APIError
	if errors.As(err, &ae) {
		status = ae.HTTPStatus
		if ae.Message != "" {
			msg = ae.Message
		} else if ae.Err != nil {
			msg = ae.Err.Error()
		}
	}
	_ = writeJSONStatus(w, status, map[string]string{"error": msg})
}

// readOnlyError is the 403 of a change through a read-only site console.
func readOnlyError(r *http.Request) error {
	return apiError(http.StatusForbidden, "%s %s: this console is served read-only on a site (rate_limit_console "+
		"without allow_changes): make the change through the admin endpoint, or allow changes on this site "+
		"(docs/console.md)", r.Method, r.URL.Path)
}
