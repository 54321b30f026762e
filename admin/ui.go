package admin

import (
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// The web console (console/): GET /rate_limit/ui/ is its index.html, /rate_limit/ui/assets/…
// its scripts and styles, /rate_limit/ui redirects to /rate_limit/ui/. It needs no cluster: it
// asks the API for everything it shows.

// uiTypes are the content types of the console's files, by extension (not left to the
// system's mime tables).
var uiTypes = map[string]string{
	".html":  "text/html; charset=utf-8",
	".js":    "text/javascript; charset=utf-8",
	".css":   "text/css; charset=utf-8",
	".svg":   "image/svg+xml",
	".png":   "image/png",
	".ico":   "image/x-icon",
	".json":  "application/json",
	".woff2": "font/woff2",
}

// uiPolicy keeps the console to its own files and its own API, and out of frames.
const uiPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'"

// isUI reports whether rest (the path below /rate_limit/) belongs to the console.
func isUI(rest string) bool {
	return rest == "ui" || strings.HasPrefix(rest, "ui/")
}

// serveUI serves the console's files from files (console.Files()).
func serveUI(w http.ResponseWriter, r *http.Request, rest string, files fs.FS) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return apiError(http.StatusMethodNotAllowed, "method %s not allowed on %s (allowed: GET, HEAD)", r.Method, r.URL.Path)
	}
	if rest == "ui" {
		http.Redirect(w, r, prefix+"ui/", http.StatusMovedPermanently)
		return nil
	}
	name := strings.TrimPrefix(rest, "ui/")
	if name == "" {
		name = "index.html"
	}
	if name != path.Clean(name) || !fs.ValidPath(name) {
		return apiError(http.StatusNotFound, "no console file %s", r.URL.Path)
	}
	if st, err := fs.Stat(files, name); err != nil || st.IsDir() {
		return apiError(http.StatusNotFound, "no console file %s", r.URL.Path)
	}
	b, err := fs.ReadFile(files, name)
	if err != nil {
		return apiError(http.StatusInternalServerError, "console file %s: %v", name, err)
	}
	h := w.Header()
	ct, ok := uiTypes[path.Ext(name)]
	if !ok {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", uiPolicy)
	h.Set("Referrer-Policy", "same-origin")
	if strings.HasPrefix(name, "assets/") {
		h.Set("Cache-Control", "public, max-age=31536000, immutable") // content-hashed names
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b) //nolint:gosec // b is a file of the embedded console build, not request input
	}
	return nil
}
