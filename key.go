package tierbucket

import (
	"net/http"
	"net/textproto"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

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
