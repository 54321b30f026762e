package admin

import (
	"errors"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/console"
)

// TestConsoleServed: /rate_limit/ui/ is the embedded console's index.html, its assets load
// below it with their content types, /rate_limit/ui redirects, and nothing else is served, all
// without any cluster running.
func TestConsoleServed(t *testing.T) {
	a := apiWith() // no cluster: the console is still served
	w, err := call(a, http.MethodGet, "/rate_limit/ui/")
	if err != nil {
		t.Fatalf("GET /rate_limit/ui/: %v", err)
	}
	index := w.Body.String()
	if w.Code != 200 || w.Header().Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(index, `<div id="app">`) {
		t.Fatalf("index: %d %q %.200q", w.Code, w.Header().Get("Content-Type"), index)
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("index CSP %q", csp)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("index Cache-Control %q, want no-cache", cc)
	}

	// Every asset index.html names is relative (./assets/…) and served with its type.
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(index, -1)
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	seen := map[string]bool{}
	for _, m := range refs {
		ref := m[1]
		if ref == "data:," {
			continue // the empty icon: nothing is loaded, and no /favicon.ico is asked for
		}
		if !strings.HasPrefix(ref, "./assets/") {
			t.Errorf("index.html refers to %q: not relative to /rate_limit/ui/ (or loaded from outside)", ref)
			continue
		}
		ext := ref[strings.LastIndex(ref, "."):]
		seen[ext] = true
		w, err := call(a, http.MethodGet, "/rate_limit/ui/"+strings.TrimPrefix(ref, "./"))
		if err != nil || w.Code != 200 {
			t.Fatalf("GET %s: %d %v", ref, w.Code, err)
		}
		if got := w.Header().Get("Content-Type"); got != types[ext] {
			t.Errorf("%s: Content-Type %q, want %q", ref, got, types[ext])
		}
		if cc := w.Header().Get("Cache-Control"); !strings.Contains(cc, "immutable") {
			t.Errorf("%s: Cache-Control %q", ref, cc)
		}
		if w.Body.Len() == 0 {
			t.Errorf("%s: empty", ref)
		}
	}
	if !seen[".js"] || !seen[".css"] {
		t.Errorf("index.html names no script or no stylesheet: %v", refs)
	}

	w, err = call(a, http.MethodGet, "/rate_limit/ui")
	if err != nil || w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/rate_limit/ui/" {
		t.Errorf("GET /rate_limit/ui: %d %q %v", w.Code, w.Header().Get("Location"), err)
	}

	for _, target := range []string{"/rate_limit/ui/nope.js", "/rate_limit/ui/assets", "/rate_limit/ui/assets/", "/rate_limit/ui/../routes.go", "/rate_limit/ui//index.html"} {
		_, err := call(a, http.MethodGet, target)
		var ae caddy.APIError
		if !errors.As(err, &ae) || ae.HTTPStatus != http.StatusNotFound {
			t.Errorf("GET %s: %v, want a 404", target, err)
		}
	}
	w, err = call(a, http.MethodPost, "/rate_limit/ui/")
	var ae caddy.APIError
	if !errors.As(err, &ae) || ae.HTTPStatus != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /rate_limit/ui/: %v, Allow %q", err, w.Header().Get("Allow"))
	}
	w, err = call(a, http.MethodHead, "/rate_limit/ui/")
	if err != nil || w.Code != 200 || w.Body.Len() != 0 {
		t.Errorf("HEAD /rate_limit/ui/: %d, %d bytes, %v", w.Code, w.Body.Len(), err)
	}
}

// TestConsoleEmbedded: the embedded build has an index.html and only files below assets/
// besides it (what `npm run build` writes; CI checks that it matches the sources).
func TestConsoleEmbedded(t *testing.T) {
	var files []string
	err := fs.WalkDir(console.Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	hasIndex := false
	for _, f := range files {
		switch {
		case f == "index.html":
			hasIndex = true
		case !strings.HasPrefix(f, "assets/"):
			t.Errorf("unexpected file %s in console/dist", f)
		}
	}
	if !hasIndex {
		t.Errorf("console/dist has no index.html: %v", files)
	}
}
