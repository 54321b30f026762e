// Package siteconsole is the http.handlers.rate_limit_console module: the web console and the
// read routes of the rate_limit admin API served on a site, below a path, behind whatever
// authentication the site has (basic_auth, forward_auth, client certificates), so that a browser
// opens the console by the site's address with no change to the admin endpoint's origins. It
// is read-only unless allow_changes: PUT, POST and DELETE are refused with 403, and the console
// hides its editing controls (docs/console.md).
//
// Caddyfile:
//
//	rate_limit_console [<path>] {
//		allow_changes
//	}
//
// <path> defaults to /rate_limit; the console is at <path>/ui/.
package siteconsole

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tierbucket/caddy-tierbucket/admin"
)

// DefaultPath is where the console is served without a <path>.
const DefaultPath = "/rate_limit"

// apiPrefix is the admin API's path, which the site's <path> stands for.
const apiPrefix = "/rate_limit"

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterDirective("rate_limit_console", parseCaddyfile)
	// After the authentication handlers (basic_auth, forward_auth) and encode, so that the
	// console is behind the site's authentication and its answers are compressed.
	httpcaddyfile.RegisterDirectiveOrder("rate_limit_console", httpcaddyfile.Before, "respond")
}

// Handler is the http.handlers.rate_limit_console module.
type Handler struct {
	// Path is where the console and the API are served: <path>/ui/ and <path>/apps, … Default
	// /rate_limit.
	Path string `json:"path,omitempty"`
	// AllowChanges lets the console change policies and the emergency (PUT, POST, DELETE);
	// without it they are refused with 403.
	AllowChanges bool `json:"allow_changes,omitempty"`

	site *admin.Site
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rate_limit_console",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision builds the API and ends its streams when the site's server begins to shut down
// (a reload or Caddy's stop would otherwise wait for every open console).
func (h *Handler) Provision(ctx caddy.Context) error {
	p, err := cleanPath(h.Path)
	if err != nil {
		return err
	}
	h.Path = p
	shutdown := make(chan struct{})
	var once sync.Once
	if srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok {
		srv.RegisterOnShutdown(func() { once.Do(func() { close(shutdown) }) })
	}
	h.site, err = admin.NewSite(ctx, h.AllowChanges, shutdown)
	return err
}

// cleanPath is p without a trailing slash, DefaultPath for "", or an error.
func cleanPath(p string) (string, error) {
	if p == "" {
		return DefaultPath, nil
	}
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "*?#") {
		return "", errPath(p)
	}
	return strings.TrimRight(p, "/"), nil
}

func errPath(p string) error {
	return fmt.Errorf("rate_limit_console: path %q: must be a plain path starting with / (no *, ? or #)", p)
}

// ServeHTTP serves <path>/… as the admin API's /rate_limit/…; other paths go to next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	rest, ok := strings.CutPrefix(r.URL.Path, h.Path)
	if !ok || rest != "" && !strings.HasPrefix(rest, "/") {
		return next.ServeHTTP(w, r)
	}
	if rest == "" { // <path>/ is the API's overview, as /rate_limit/ is
		http.Redirect(w, r, h.Path+"/ui/", http.StatusFound)
		return nil
	}
	u := *r.URL
	u.Path = apiPrefix + rest
	u.RawPath = ""
	if raw, ok := strings.CutPrefix(r.URL.EscapedPath(), h.Path); ok {
		u.RawPath = apiPrefix + raw
	}
	r2 := r.Clone(r.Context())
	r2.URL = &u
	h.site.ServeHTTP(w, r2)
	return nil
}

// parseCaddyfile sets up the handler from Caddyfile tokens:
//
//	rate_limit_console [<path>] {
//		allow_changes
//	}
func parseCaddyfile(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	var hd Handler
	h.Next() // the directive
	if h.NextArg() {
		hd.Path = h.Val()
		if h.NextArg() {
			return nil, h.ArgErr()
		}
	}
	for h.NextBlock(0) {
		switch h.Val() {
		case "allow_changes":
			if h.NextArg() {
				return nil, h.ArgErr()
			}
			hd.AllowChanges = true
		default:
			return nil, h.Errf("rate_limit_console: unknown option %q (the only one is allow_changes)", h.Val())
		}
	}
	p, err := cleanPath(hd.Path)
	if err != nil {
		return nil, h.Err(err.Error())
	}
	hd.Path = p
	matcher := caddy.ModuleMap{"path": caddyconfig.JSON(caddyhttp.MatchPath{p, p + "/*"}, nil)}
	return h.NewRoute(matcher, &hd), nil
}

// Interface guards.
var (
	_ caddy.Module                = (*Handler)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
