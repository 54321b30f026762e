package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestThroughCaddyAdmin: Caddy provisions the module in its admin endpoint's context (with the
// events app) and serves its routes; the answers are as Caddy's error handler writes them.
func TestThroughCaddyAdmin(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	cfg := `{"admin": {"listen": "unix/` + sock + `", "config": {"persist": false}}}`
	if err := caddy.Load([]byte(cfg), true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return new(net.Dialer).DialContext(ctx, "unix", sock)
	}}}
	for _, tc := range []struct {
		method, path string
		status       int
		allow, body  string
	}{
		{"HEAD", "/rate_limit/", 405, "GET", ""},
		{
			"POST", "/rate_limit/apps/alpha", 405, "GET, PUT, DELETE",
			`{"error":"method POST not allowed on /rate_limit/apps/alpha (allowed: GET, PUT, DELETE)"}` + "\n",
		},
		{
			"GET", "/rate_limit/emergency/activate", 405, "POST",
			`{"error":"method GET not allowed on /rate_limit/emergency/activate (allowed: POST)"}` + "\n",
		},
		{
			"PUT", "/rate_limit/apps/a%2Fb", 400, "",
			`{"error":"invalid app id \"a/b\": an app id is 1-128 characters of [A-Za-z0-9._:-]"}` + "\n",
		},
		{
			"GET", "/rate_limit/nope", 404, "",
			`{"error":"no rate_limit admin route /rate_limit/nope (see /rate_limit/apps, /rate_limit/clusters/\u003cid\u003e, ` +
				`/rate_limit/connections, /rate_limit/emergency, /rate_limit/history, /rate_limit/stream, /rate_limit/audit, /rate_limit/ui/)"}` + "\n",
		},
	} {
		req, err := http.NewRequest(tc.method, "http://localhost"+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Allow") != tc.allow || string(b) != tc.body {
			t.Errorf("%s %s: %d Allow %q %q, want %d %q %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), b,
				tc.status, tc.allow, tc.body)
		}
		if tc.method != "HEAD" && resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, resp.Header.Get("Content-Type"))
		}
	}
}
