package admin

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// everyRoute is each path the API serves (an example of each pattern) and its Allow.
var everyRoute = map[string]string{
	"/rate_limit/":                     "GET",
	"/rate_limit/apps":                 "GET",
	"/rate_limit/apps/":                "GET",
	"/rate_limit/apps/alpha":           "GET, PUT, DELETE",
	"/rate_limit/apps/*":               "GET, PUT, DELETE",
	"/rate_limit/clusters/c1":          "GET, PUT, DELETE",
	"/rate_limit/connections":          "GET",
	"/rate_limit/emergency":            "GET",
	"/rate_limit/emergency/activate":   "POST",
	"/rate_limit/emergency/deactivate": "POST",
	"/rate_limit/history":              "GET",
	"/rate_limit/stream":               "GET",
}

// TestEveryRouteAllow: every method a route does not take, HEAD and methods no route takes
// included, is a 405 naming the method and the route's methods (in Allow too, in the order
// GET, POST, PUT, DELETE), with nothing written, before any cluster is chosen.
func TestEveryRouteAllow(t *testing.T) {
	methods := []string{
		http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodPatch, http.MethodOptions, http.MethodTrace, http.MethodConnect, "PURGE",
	}
	for path, allowed := range everyRoute {
		for _, m := range methods {
			if slices.Contains(strings.Split(allowed, ", "), m) {
				continue
			}
			w, err := call(apiWith(), m, path) // no cluster: a 405 comes before the cluster's 404
			msg := apiErr(t, err, http.StatusMethodNotAllowed)
			if want := "method " + m + " not allowed on " + path + " (allowed: " + allowed + ")"; msg != want {
				t.Errorf("%s %s: %q, want %q", m, path, msg, want)
			}
			if got := w.Header().Values("Allow"); len(got) != 1 || got[0] != allowed {
				t.Errorf("%s %s: Allow %q, want %q", m, path, got, allowed)
			}
			if w.Body.Len() != 0 {
				t.Errorf("%s %s: body written: %q", m, path, w.Body.String())
			}
		}
	}
}

// TestUnknownPaths: a path below /rate_limit/ that no route has is a 404 naming the decoded
// path and the routes, whatever the method. Pattern syntax in a path is a name, an empty
// segment matches nothing, and an escaped slash outside an app id separates segments.
func TestUnknownPaths(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	for target, path := range map[string]string{
		"/rate_limit/nope":                "/rate_limit/nope",
		"/rate_limit/APPS":                "/rate_limit/APPS",
		"/rate_limit/apps/alpha/":         "/rate_limit/apps/alpha/",
		"/rate_limit/apps/alpha/x":        "/rate_limit/apps/alpha/x",
		"/rate_limit/apps//x":             "/rate_limit/apps//x",
		"/rate_limit//apps":               "/rate_limit//apps",
		"/rate_limit//":                   "/rate_limit//",
		"/rate_limit/clusters":            "/rate_limit/clusters",
		"/rate_limit/clusters/":           "/rate_limit/clusters/",
		"/rate_limit/clusters/c1/":        "/rate_limit/clusters/c1/",
		"/rate_limit/clusters/a%2Fb":      "/rate_limit/clusters/a/b",
		"/rate_limit/connections/":        "/rate_limit/connections/",
		"/rate_limit/emergency/":          "/rate_limit/emergency/",
		"/rate_limit/emergency/x":         "/rate_limit/emergency/x",
		"/rate_limit/emergency/activate/": "/rate_limit/emergency/activate/",
		"/rate_limit/history/":            "/rate_limit/history/",
		"/rate_limit/stream/":             "/rate_limit/stream/",
		"/rate_limit/%7B$%7D":             "/rate_limit/{$}",
		"/rate_limit/%2E%2E":              "/rate_limit/..",
		"/rate_limit/apps/%2E%2E/x":       "/rate_limit/apps/../x",
	} {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			w, err := call(apiWith(c), m, target)
			msg := apiErr(t, err, http.StatusNotFound)
			want := "no rate_limit admin route " + path + " (see /rate_limit/apps, /rate_limit/clusters/<id>, " +
				"/rate_limit/connections, /rate_limit/emergency, /rate_limit/history, /rate_limit/stream, /rate_limit/audit, /rate_limit/ui/)"
			if msg != want {
				t.Errorf("%s %s: %q, want %q", m, target, msg, want)
			}
			if w.Body.Len() != 0 || w.Header().Get("Allow") != "" {
				t.Errorf("%s %s: wrote %q, Allow %q", m, target, w.Body.String(), w.Header().Get("Allow"))
			}
		}
	}
}

// TestEscapedPaths: the routes match the decoded path. An escaped character in an id is the
// character; an escaped dot is a name, not a step; an escaped slash in an app id is a 400
// whatever the method (the id cannot exist), elsewhere a slash.
func TestEscapedPaths(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	a := apiWith(c)
	var app AppView
	for _, target := range []string{"/rate_limit/apps/%61lpha", "/rate_limit/%61pps/alpha", "/rate_limit/apps%2Falpha"} {
		get(t, a, target, &app)
		if app.ID != "alpha" {
			t.Errorf("GET %s: app %q, want alpha", target, app.ID)
		}
	}
	get(t, a, "/rate_limit/apps/%2A", &app)
	if app.ID != "*" {
		t.Errorf("GET apps/%%2A: app %q, want *", app.ID)
	}
	var list, slashed AppsView
	get(t, a, "/rate_limit/apps", &list)
	get(t, a, "/rate_limit/apps/", &slashed)
	if len(list.Apps) != 3 || len(slashed.Apps) != len(list.Apps) || slashed.Cluster != list.Cluster {
		t.Errorf("apps/ %+v, apps %+v", slashed, list)
	}
	var policy ClusterPolicyView
	get(t, a, "/rate_limit/clusters/c%31", &policy)
	if policy.Cluster != "c1" {
		t.Errorf("GET clusters/c%%31: cluster %q", policy.Cluster)
	}

	for target, want := range map[string]string{
		"/rate_limit/apps/%2E%2E": `unknown app ".." in cluster "c1"`,
		"/rate_limit/apps/%2E":    `unknown app "." in cluster "c1"`,
		"/rate_limit/apps/a.b":    `unknown app "a.b" in cluster "c1"`,
	} {
		_, err := call(a, http.MethodGet, target)
		if msg := apiErr(t, err, http.StatusNotFound); !strings.HasPrefix(msg, want) {
			t.Errorf("GET %s: %q, want %s", target, msg, want)
		}
	}
	for target, id := range map[string]string{
		"/rate_limit/apps/a%20b":           "a b",
		"/rate_limit/apps/%7Bid%7D":        "{id}",
		"/rate_limit/apps/a;b":             "a;b",
		"/rate_limit/apps/%C3%A9":          "é",
		"/rate_limit/apps/a%2Fb":           "a/b",
		"/rate_limit/apps/a%2fb/c":         "a/b/c",
		"/rate_limit/apps/..%2Falpha":      "../alpha",
		"/rate_limit/apps/a%2Fb?cluster=x": "a/b",
	} {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			_, err := call(a, m, target)
			if msg := apiErr(t, err, http.StatusBadRequest); !strings.HasPrefix(msg, "invalid app id \""+id+"\": ") {
				t.Errorf("%s %s: %q, want the invalid id %q", m, target, msg, id)
			}
		}
		if strings.Contains(strings.ToLower(target), "%2f") {
			_, err := call(a, http.MethodPatch, target)
			apiErr(t, err, http.StatusBadRequest)
		}
	}
	w, err := call(a, http.MethodGet, "/rate_limit/emergency%2Factivate")
	apiErr(t, err, http.StatusMethodNotAllowed)
	if w.Header().Get("Allow") != "POST" {
		t.Errorf("GET emergency%%2Factivate: Allow %q, want the route emergency/activate's", w.Header().Get("Allow"))
	}
}
