package siteconsole

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// adapt adapts a Caddyfile with one site and returns the site's first route as JSON.
func adapt(t *testing.T, directive string) (string, error) {
	t.Helper()
	src := ":8080 {\n\t" + directive + "\n\trespond \"site\"\n}\n"
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return "", err
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []json.RawMessage `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, s := range cfg.Apps.HTTP.Servers {
		return string(s.Routes[0]), nil
	}
	t.Fatalf("no server in %s", out)
	return "", nil
}

// TestCaddyfile: the directive's path (default /rate_limit) is the route's path matcher, the
// handler comes before respond, and allow_changes is its only option.
func TestCaddyfile(t *testing.T) {
	for directive, want := range map[string][]string{
		"rate_limit_console": {`"path":["/rate_limit","/rate_limit/*"]`, `"handler":"rate_limit_console","path":"/rate_limit"`},
		"rate_limit_console /ops/console/ {\n\t\tallow_changes\n\t}": {
			`"path":["/ops/console","/ops/console/*"]`, `"allow_changes":true`, `"path":"/ops/console"`,
		},
	} {
		got, err := adapt(t, directive)
		if err != nil {
			t.Fatalf("%q: %v", directive, err)
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%q: route %s lacks %s", directive, got, w)
			}
		}
		if strings.Contains(got, "static_response") {
			t.Errorf("%q: respond runs before the console: %s", directive, got)
		}
	}
	for directive, msg := range map[string]string{
		"rate_limit_console a b":                           "wrong argument count",
		"rate_limit_console rel":                           "must be a plain path",
		"rate_limit_console /x* ":                          "must be a plain path",
		"rate_limit_console {\n\t\tallow_writes\n\t}":      `unknown option "allow_writes"`,
		"rate_limit_console {\n\t\tallow_changes yes\n\t}": "wrong argument count",
	} {
		if _, err := adapt(t, directive); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: error %v, want one saying %q", directive, err, msg)
		}
	}
}

// startCaddy runs Caddy in this process with one server: the console read-only at /ops, with
// allow_changes at /rw, and a 418 for every other path. It returns the server's address.
func startCaddy(t *testing.T) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testnet.FreePort(t))
	cfg := fmt.Sprintf(`{"admin": {"disabled": true}, "apps": {"http": {"servers": {"s": {"listen": [%q], "routes": [
		{"handle": [{"handler": "rate_limit_console", "path": "/ops"}]},
		{"handle": [{"handler": "rate_limit_console", "path": "/rw", "allow_changes": true}]},
		{"handle": [{"handler": "static_response", "status_code": 418}]}
	]}}}}}`, addr)
	if err := caddy.Load([]byte(cfg), true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	return "http://" + addr
}

// answer is a response read in full.
type answer struct {
	StatusCode int
	Header     http.Header
}

func do(t *testing.T, method, url string) (answer, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{"guaranteed": 1}`))
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header}, string(b)
}

// TestServes: the console and the API below the path, a redirect at the path itself, other
// paths to the next handler; read-only refuses every change with a 403 naming allow_changes,
// whatever the route, and allow_changes lets a change through to the API.
func TestServes(t *testing.T) {
	base := startCaddy(t)
	if resp, body := do(t, "GET", base+"/ops/ui/"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "<html") {
		t.Errorf("GET /ops/ui/: %d %.80s", resp.StatusCode, body)
	}
	if resp, _ := do(t, "GET", base+"/ops"); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ops/ui/" {
		t.Errorf("GET /ops: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, p := range []string{"/other", "/opsx/ui/", "/"} {
		if resp, _ := do(t, "GET", base+p); resp.StatusCode != http.StatusTeapot {
			t.Errorf("GET %s: %d, want the next handler's", p, resp.StatusCode)
		}
	}
	// No rate_limit cluster runs here: a read reaches the API, which finds none.
	if resp, body := do(t, "GET", base+"/ops/"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no rate_limit cluster") {
		t.Errorf("GET /ops/ (the overview): %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", base+"/ops/apps"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no rate_limit cluster") {
		t.Errorf("GET /ops/apps: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct{ method, path string }{
		{"PUT", "/ops/apps/alpha"}, {"DELETE", "/ops/apps/alpha"}, {"POST", "/ops/emergency/activate"}, {"PUT", "/ops/clusters/c1"},
	} {
		resp, body := do(t, c.method, base+c.path)
		var e map[string]string
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(e["error"], "allow_changes") || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s read-only: %d %s", c.method, c.path, resp.StatusCode, body)
		}
	}
	if resp, body := do(t, "PUT", base+"/rw/apps/alpha"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no rate_limit cluster") {
		t.Errorf("PUT with allow_changes: %d %s", resp.StatusCode, body)
	}
}
