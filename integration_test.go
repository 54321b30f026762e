package tierbucket

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// In-process tests: Caddy runs inside the test binary (caddytest) with the configs below, loaded
// through the admin API like a real reload. Every test uses its own cluster id, so that the
// shared state of one test never leaks into another.

var (
	adminOnce sync.Once
	adminPort int
)

// site is one in-process Caddy config with a single http:// site.
type site struct {
	t    *testing.T
	tc   *caddytest.Tester
	base string
}

// loadSite (re)loads the in-process Caddy with one site whose body is routes.
func loadSite(t *testing.T, routes string) *site {
	t.Helper()
	adminOnce.Do(func() { adminPort = testnet.FreePort(t) })
	port := testnet.FreePort(t)
	tc := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{
		AdminPort:          adminPort,
		LoadRequestTimeout: 10 * time.Second,
	})
	tc.InitServer(siteConfig(adminPort, port, routes), "caddyfile")
	if t.Failed() {
		t.FailNow()
	}
	return &site{t: t, tc: tc, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
}

func siteConfig(admin, port int, routes string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	skip_install_trust
	auto_https off
	persist_config off
	http_port %d
	grace_period 1s
}

http://127.0.0.1:%d {
%s
}
`, admin, port, port, routes)
}

// answer is the status and headers of a response whose body do has read and closed.
type answer struct {
	StatusCode int
	Header     http.Header
}

// do sends one request and returns the response's status and headers, and its body, which it
// has read and closed: no response leaves do with its body open.
func (s *site) do(method, path, app string, body string) (answer, string) {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if app != "" {
		req.Header.Set("X-App-Id", app)
	}
	resp, err := s.tc.Client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return answer{StatusCode: resp.StatusCode, Header: resp.Header}, string(b)
}

// rejection is the JSON body of a rejection.
type rejection struct {
	Error      string `json:"error"`
	Reason     string `json:"reason"`
	RetryAfter int64  `json:"retry_after"`
	Remaining  int64  `json:"remaining"`
	Cost       int64  `json:"cost"`
}

func decodeRejection(t *testing.T, resp answer, body string) rejection {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var r rejection
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("rejection body %q: %v", body, err)
	}
	if r.Error != "rate_limit_exceeded" {
		t.Errorf("error = %q", r.Error)
	}
	return r
}

// A tiny refill rate (one token per 100 s) makes "burst then reject" independent of timing.
const slowApp = `guaranteed 0.01`

// TestIntegrationBurstThen429: a burst, then 429 with the JSON body and the headers: by
// default the draft fields on the rejection only; with `headers draft` RateLimit on every
// response and RateLimit-Policy on the rejection only; with `headers both` the X-RateLimit-*
// fields too, and the policy on every response.
func TestIntegrationBurstThen429(t *testing.T) {
	for _, mode := range []string{"", "draft", "both"} {
		t.Run("headers="+cmp.Or(mode, "default"), func(t *testing.T) {
			directive := ""
			if mode != "" {
				directive = "headers " + mode
			}
			s := loadSite(t, `
	rate_limit {
		cluster it-burst-`+cmp.Or(mode, "default")+`
		key {http.request.header.X-App-Id}
		`+directive+`
		app alpha {
			`+slowApp+`
			burst 5
		}
	}
	respond "ok"`)
			for i := 0; i < 5; i++ {
				resp, body := s.do("GET", "/bucket/key", "alpha", "")
				if resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
				}
				// t: the seconds until the bucket is full again, (5 - remaining) / 0.01
				want := fmt.Sprintf(`"app";r=%d;t=%d`, 4-i, (i+1)*100)
				if mode == "" {
					want = "" // the default: rejections only
				}
				if got := resp.Header.Get("RateLimit"); got != want {
					t.Errorf("request %d: RateLimit = %q, want %q", i+1, got, want)
				}
				policy, legacy := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("X-RateLimit-Remaining")
				if mode == "both" {
					if legacy != strconv.Itoa(4-i) || policy != `"app";q=5;w=500` {
						t.Errorf("request %d: X-RateLimit-Remaining = %q, want %d; RateLimit-Policy %q", i+1, legacy, 4-i, policy)
					}
				} else if policy != "" || legacy != "" || resp.Header.Get("X-RateLimit-Cost") != "" {
					t.Errorf("request %d: admitted response carries RateLimit-Policy %q, X-RateLimit-Remaining %q (draft: RateLimit only)",
						i+1, policy, legacy)
				}
				if resp.Header.Get("Retry-After") != "" {
					t.Errorf("Retry-After on an admitted request")
				}
			}
			resp, body := s.do("GET", "/bucket/key", "alpha", "")
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("6th request: %d %q, want 429", resp.StatusCode, body)
			}
			r := decodeRejection(t, resp, body)
			if r.Reason != "app_exhausted" || r.RetryAfter < 1 || r.Remaining != 0 || r.Cost != 1 {
				t.Errorf("rejection %+v", r)
			}
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || ra < 1 || int64(ra) != r.RetryAfter {
				t.Errorf("Retry-After = %q, body retry_after %d", resp.Header.Get("Retry-After"), r.RetryAfter)
			}
			if got := resp.Header.Get("RateLimit-Policy"); got != `"app";q=5;w=500` {
				t.Errorf("RateLimit-Policy = %q", got)
			}
			if got := resp.Header.Get("RateLimit"); got != fmt.Sprintf(`"app";r=0;t=%d`, ra) {
				t.Errorf("RateLimit = %q", got)
			}
			if got := resp.Header.Get("X-RateLimit-Limit"); got != "" {
				t.Errorf("X-RateLimit-Limit = %q: not one of the documented headers (the limit is in RateLimit-Policy)", got)
			}
			if mode == "both" {
				reset, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
				if now := time.Now().Unix(); reset < now || reset > now+int64(ra)+2 {
					t.Errorf("X-RateLimit-Reset = %d, now %d", reset, now)
				}
			} else if got := resp.Header.Get("X-RateLimit-Reset"); got != "" {
				t.Errorf("default headers: X-RateLimit-Reset = %q on the rejection", got)
			}
			// another app is not affected
			if resp, _ := s.do("GET", "/bucket/key", "other", ""); resp.StatusCode != 200 {
				t.Errorf("unknown app shares nothing with alpha, got %d", resp.StatusCode)
			}
		})
	}
}

// readingBackend is an upstream that reads the whole request body, like a real object store.
func readingBackend(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read %d", n)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestIntegrationCostWeighted(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		headers both
		cluster it-cost
		key {http.request.header.X-App-Id}
		app alpha {
			`+slowApp+`
			burst 20
		}
	}
	handle /unread/* {
		respond "unread"
	}
	reverse_proxy `+readingBackend(t))
	payload := strings.Repeat("x", 200*1024) // 4 quanta of 64 KiB
	// PUT: 5 + ceil(204800/65536) = 9, the body is read in full by the backend
	for i := 0; i < 2; i++ {
		resp, body := s.do("PUT", "/bucket/object", "alpha", payload)
		if resp.StatusCode != 200 || body != "read 204800" || resp.Header.Get("X-RateLimit-Cost") != "9" {
			t.Fatalf("PUT %d: %d %q cost header %q", i+1, resp.StatusCode, body, resp.Header.Get("X-RateLimit-Cost"))
		}
	}
	resp, body := s.do("PUT", "/bucket/object", "alpha", payload)
	if resp.StatusCode != 429 {
		t.Fatalf("third PUT: %d %q", resp.StatusCode, body)
	}
	if r := decodeRejection(t, resp, body); r.Cost != 9 || r.Reason != "app_exhausted" {
		t.Errorf("rejection %+v, want cost 9, app_exhausted", r)
	}
}

// TestIntegrationDeleteObjects: an S3 DeleteObjects request is charged DELETE's base per object
// its body names (plus its bytes), as the backend reads the list; a list nobody reads costs one
// delete. Up front it takes as many objects as its length can hold, so a list the app cannot
// afford is refused before it reaches the backend. (Charged as a plain POST, 5, a bulk delete
// of 1000 objects cost what one PUT does.)
func TestIntegrationDeleteObjects(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		cluster it-delete-objects
		key {http.request.header.X-App-Id}
		app alpha {
			`+slowApp+`
			burst 1000
		}
	}
	handle /left/* {
		respond "{http.rate_limit.remaining}"
	}
	handle /unread {
		respond "unread"
	}
	reverse_proxy `+readingBackend(t))
	list := func(n int) string {
		var b strings.Builder
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
		for i := range n {
			fmt.Fprintf(&b, "<Object><Key>photos/%04d.jpg</Key></Object>", i)
		}
		b.WriteString("<Quiet>true</Quiet></Delete>")
		return b.String()
	}
	left := func() string { // a GET of an object: 1
		_, body := s.do("GET", "/left/x", "alpha", "")
		return body
	}
	// 10 objects: 10 × 2 + 1 quantum = 21.
	body := list(10)
	resp, got := s.do("POST", "/bucket?delete", "alpha", body)
	if resp.StatusCode != 200 || got != fmt.Sprintf("read %d", len(body)) {
		t.Fatalf("DeleteObjects: %d %q", resp.StatusCode, got)
	}
	if l := left(); l != "978" {
		t.Errorf("after deleting 10 objects: %s left, want 978 (1000 - 21 - 1)", l)
	}
	// Nobody reads the list: one delete (2), no bytes.
	if resp, got := s.do("POST", "/unread?delete", "alpha", list(300)); resp.StatusCode != 200 || got != "unread" {
		t.Fatalf("unread DeleteObjects: %d %q", resp.StatusCode, got)
	}
	if l := left(); l != "975" {
		t.Errorf("after an unread list: %s left, want 975 (978 - 2 - 1)", l)
	}
	// 400 objects in 17 KB can be up to 607 objects: 1215 up front (the burst, 1000, at most)
	// is more than the 975 left: refused, nothing taken.
	body = list(400)
	resp, got = s.do("POST", "/bucket?delete", "alpha", body)
	if resp.StatusCode != 429 {
		t.Fatalf("400 objects with 975 tokens left: %d %q, want 429", resp.StatusCode, got)
	}
	if r := decodeRejection(t, resp, got); r.Cost != int64(2*(len(body)/29)+1) {
		t.Errorf("rejection %+v, want the up-front cost %d", r, 2*(len(body)/29)+1)
	}
	if l := left(); l != "974" {
		t.Errorf("after the refusal: %s left, want 974 (975 - 1)", l)
	}
}

// TestIntegrationUnreadBodyRefunded: a declared body that nobody reads is refunded at
// settlement, so a PUT answered without reading its body costs only its base.
func TestIntegrationUnreadBodyRefunded(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		headers both
		cluster it-refund
		key {http.request.header.X-App-Id}
		app alpha {
			`+slowApp+`
			burst 20
		}
	}
	respond "{http.rate_limit.remaining}"`)
	payload := strings.Repeat("x", 200*1024)
	resp, body := s.do("PUT", "/bucket/object", "alpha", payload)
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Cost") != "9" || body != "11" {
		t.Fatalf("PUT: %d cost %q remaining %q", resp.StatusCode, resp.Header.Get("X-RateLimit-Cost"), body)
	}
	// 9 taken, 4 refunded (the unread 4 quanta): 15 left before this GET, 14 after
	resp, body = s.do("GET", "/bucket/object", "alpha", "")
	if resp.StatusCode != 200 || body != "14" {
		t.Errorf("after the refund: %d remaining %q, want 14", resp.StatusCode, body)
	}
}

func TestIntegrationS3Operations(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		headers both
		cluster it-ops
		key {http.request.header.X-App-Id}
		app alpha {
			guaranteed 1000
			burst 100000
		}
	}
	respond "{http.rate_limit.cost}"`)
	for _, c := range []struct {
		method, path, body, want string
	}{
		{"GET", "/bucket", "", "3"},                              // LIST (no object key)
		{"GET", "/bucket/", "", "3"},                             // LIST
		{"GET", "/bucket/key", "", "1"},                          // GET
		{"GET", "/bucket/key?list-type=2", "", "3"},              // LIST by query
		{"HEAD", "/bucket/key", "", ""},                          // HEAD has no body
		{"DELETE", "/bucket/key", "", "2"},                       // DELETE
		{"POST", "/bucket/key?uploads", "", "2"},                 // MULTIPART_INIT
		{"POST", "/bucket/key?uploadId=1", "", "8"},              // MULTIPART_COMPLETE
		{"DELETE", "/bucket/key?uploadId=1", "", "3"},            // MULTIPART_ABORT
		{"POST", "/bucket?delete", "", "2"},                      // DELETE_OBJECTS: one object at least
		{"PUT", "/bucket/key?partNumber=1&uploadId=1", "x", "5"}, // MULTIPART_UPLOAD 4 + 1 quantum
	} {
		resp, body := s.do(c.method, c.path, "alpha", c.body)
		if resp.StatusCode != 200 {
			t.Errorf("%s %s: status %d", c.method, c.path, resp.StatusCode)
			continue
		}
		if c.method == "HEAD" {
			body = resp.Header.Get("X-RateLimit-Cost")
			c.want = "1"
		}
		if body != c.want {
			t.Errorf("%s %s: cost %q, want %s", c.method, c.path, body, c.want)
		}
	}
}

func TestIntegrationUnknownApps(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		s := loadSite(t, `
	rate_limit {
		cluster it-unknown-reject
		key {http.request.header.X-App-Id}
		unknown_app reject
		app alpha {
			guaranteed 10
		}
	}
	respond "ok"`)
		resp, body := s.do("GET", "/b/k", "stranger", "")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("unknown app: %d %q, want 403", resp.StatusCode, body)
		}
		if r := decodeRejection(t, resp, body); r.Reason != "unknown_app" || r.RetryAfter != 0 {
			t.Errorf("rejection %+v", r)
		}
		if resp.Header.Get("Retry-After") != "" {
			t.Error("Retry-After on a 403")
		}
		if resp, _ := s.do("GET", "/b/k", "alpha", ""); resp.StatusCode != 200 {
			t.Errorf("known app: %d", resp.StatusCode)
		}
	})
	t.Run("shared", func(t *testing.T) {
		s := loadSite(t, `
	rate_limit {
		cluster it-unknown-shared
		key {http.request.header.X-App-Id}
		app * {
			`+slowApp+`
			burst 3
		}
	}
	respond "{http.rate_limit.app}"`)
		// rotating ids never buy more quota: three ids share one bucket of 3
		for i, id := range []string{"u1", "u2", "u3"} {
			resp, body := s.do("GET", "/b/k", id, "")
			if resp.StatusCode != 200 || body != id {
				t.Fatalf("request %d (%s): %d %q", i, id, resp.StatusCode, body)
			}
		}
		resp, body := s.do("GET", "/b/k", "u4", "")
		if resp.StatusCode != 429 || decodeRejection(t, resp, body).Reason != "app_exhausted" {
			t.Errorf("fourth unknown id: %d %q, want 429", resp.StatusCode, body)
		}
	})
	t.Run("isolated", func(t *testing.T) {
		s := loadSite(t, `
	rate_limit {
		cluster it-unknown-isolated
		key {http.request.header.X-App-Id}
		unknown_app isolated
		app * {
			`+slowApp+`
			burst 2
		}
	}
	respond "{http.rate_limit.remaining}"`)
		// each unknown id gets its own bucket of 2 from the template
		for _, id := range []string{"i1", "i2"} {
			for i := 0; i < 2; i++ {
				if resp, body := s.do("GET", "/b/k", id, ""); resp.StatusCode != 200 || body != strconv.Itoa(1-i) {
					t.Fatalf("%s request %d: %d %q", id, i+1, resp.StatusCode, body)
				}
			}
			if resp, _ := s.do("GET", "/b/k", id, ""); resp.StatusCode != 429 {
				t.Errorf("%s third request: %d, want 429", id, resp.StatusCode)
			}
		}
	})
	t.Run("invalid id", func(t *testing.T) {
		s := loadSite(t, `
	rate_limit {
		cluster it-invalid
		key {http.request.header.X-App-Id}
	}
	respond "ok"`)
		for _, id := range []string{"", "has space", "slash/no", strings.Repeat("a", 129)} {
			resp, body := s.do("GET", "/b/k", id, "")
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("id %q: %d %q, want 400", id, resp.StatusCode, body)
				continue
			}
			if r := decodeRejection(t, resp, body); r.Reason != "invalid_app_id" {
				t.Errorf("id %q: %+v", id, r)
			}
		}
	})
}

func TestIntegrationShadow(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		cluster it-shadow
		key {http.request.header.X-App-Id}
		unknown_app reject
		app alpha {
			`+slowApp+`
			burst 2
		}
		shadow
	}
	respond "{http.rate_limit.decision} {http.rate_limit.reason}"`)
	var decisions []string
	for i := 0; i < 4; i++ {
		resp, body := s.do("GET", "/b/k", "alpha", "")
		if resp.StatusCode != 200 {
			t.Fatalf("shadow mode rejected request %d: %d %q", i+1, resp.StatusCode, body)
		}
		if i >= 2 && resp.Header.Get("Retry-After") == "" {
			t.Errorf("request %d: headers should say a rejection would have happened", i+1)
		}
		decisions = append(decisions, strings.TrimSpace(body))
	}
	want := []string{"allowed", "allowed", "shadow_rejected app_exhausted", "shadow_rejected app_exhausted"}
	if strings.Join(decisions, ",") != strings.Join(want, ",") {
		t.Errorf("decisions %q, want %q", decisions, want)
	}
	if resp, body := s.do("GET", "/b/k", "stranger", ""); resp.StatusCode != 200 || body != "shadow_rejected unknown_app" {
		t.Errorf("unknown app in shadow mode: %d %q", resp.StatusCode, body)
	}
}

func TestIntegrationErrorsMode(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		cluster it-errors
		key {http.request.header.X-App-Id}
		app alpha {
			`+slowApp+`
			burst 1
		}
		errors
	}
	respond "ok"
	handle_errors {
		respond "custom {err.status_code} {http.rate_limit.reason} cost={http.rate_limit.cost}" {err.status_code}
	}`)
	if resp, _ := s.do("GET", "/b/k", "alpha", ""); resp.StatusCode != 200 {
		t.Fatalf("first request %d", resp.StatusCode)
	}
	resp, body := s.do("GET", "/b/k", "alpha", "")
	if resp.StatusCode != 429 || body != "custom 429 app_exhausted cost=1" {
		t.Errorf("errors mode: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("errors mode lost the rate-limit headers")
	}
}

func TestIntegrationMaxWait(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		cluster it-wait
		key {http.request.header.X-App-Id}
		app alpha {
			guaranteed 4
			burst 4
		}
		app beta {
			guaranteed 0.01
			burst 1
		}
		max_wait 1500ms
	}
	respond "ok"`)
	// alpha refills one token every 250 ms: the fifth request waits instead of failing
	for i := 0; i < 5; i++ {
		if resp, body := s.do("GET", "/b/k", "alpha", ""); resp.StatusCode != 200 {
			t.Fatalf("alpha request %d: %d %q", i+1, resp.StatusCode, body)
		}
	}
	// beta's next token is 100 s away: longer than max_wait, so it is rejected
	if resp, _ := s.do("GET", "/b/k", "beta", ""); resp.StatusCode != 200 {
		t.Fatalf("beta first request %d", resp.StatusCode)
	}
	if resp, _ := s.do("GET", "/b/k", "beta", ""); resp.StatusCode != 429 {
		t.Errorf("beta: %d, want 429 after waiting max_wait", resp.StatusCode)
	}
}

func TestIntegrationPlaceholdersInHeader(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		cluster it-ph
		key {http.request.header.X-App-Id}
		app alpha {
			`+slowApp+`
			burst 10
		}
		headers off
	}
	header >X-Limit-App {http.rate_limit.app}
	header >X-Limit-Cost {http.rate_limit.cost}
	header >X-Limit-Remaining {http.rate_limit.remaining}
	header >X-Limit-Decision {http.rate_limit.decision}
	respond "ok"`)
	resp, _ := s.do("PUT", "/b/k", "alpha", "abc")
	for name, want := range map[string]string{
		"X-Limit-App": "alpha", "X-Limit-Cost": "6", "X-Limit-Remaining": "4", "X-Limit-Decision": "allowed",
	} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, h := range []string{"X-RateLimit-Remaining", "RateLimit", "RateLimit-Policy"} {
		if resp.Header.Get(h) != "" {
			t.Errorf("headers off, but %s is set", h)
		}
	}
}

func TestIntegrationMetrics(t *testing.T) {
	s := loadSite(t, `
	rate_limit {
		cluster it-metrics
		key {http.request.header.X-App-Id}
		app alpha {
			`+slowApp+`
			burst 2
		}
	}
	respond "ok"`)
	for i := 0; i < 3; i++ {
		s.do("GET", "/b/k", "alpha", "")
	}
	s.do("GET", "/b/k", "bad id", "")
	resp, err := http.Get(fmt.Sprintf("http://localhost:%d/metrics", adminPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := string(b)
	for _, want := range []string{
		`caddy_rate_limit_requests_total{app="alpha",cluster="it-metrics",decision="allowed",reason=""} 2`,
		`caddy_rate_limit_requests_total{app="alpha",cluster="it-metrics",decision="rejected",reason="app_exhausted"} 1`,
		`caddy_rate_limit_requests_total{app="*",cluster="it-metrics",decision="rejected",reason="invalid_app_id"} 1`,
		`caddy_rate_limit_cost_total{app="alpha",cluster="it-metrics"} 2`,
		`caddy_rate_limit_connections{app="alpha",cluster="it-metrics"} 0`,
		`caddy_rate_limit_connections_peak{app="alpha",cluster="it-metrics"} 1`,
		`caddy_rate_limit_degradation_level{cluster="it-metrics"} 0`,
		`caddy_rate_limit_emergency_mode{cluster="it-metrics"} 0`,
		`caddy_rate_limit_local_tokens{app="alpha",cluster="it-metrics"}`,
		`caddy_rate_limit_borrowed_tokens{app="alpha",cluster="it-metrics"} 0`,
		`caddy_rate_limit_debt_tokens{app="alpha",cluster="it-metrics"} 0`,
		`caddy_rate_limit_leases_total{app="alpha",cluster="it-metrics"}`,
		`caddy_rate_limit_stats_flushes_total{cluster="it-metrics"} 0`, // 2 requests: no flush yet
		`caddy_rate_limit_store_latency_seconds_count{cluster="it-metrics",op="lease"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(m, "\n") {
			if strings.Contains(l, "it-metrics") {
				t.Log(l)
			}
		}
	}
}

// TestIntegrationReloadKeepsState: a reload with a changed policy keeps the bucket's tokens
// (the remaining count continues instead of starting from a full bucket again).
func TestIntegrationReloadKeepsState(t *testing.T) {
	cfg := func(burst int) string {
		return fmt.Sprintf(`
	rate_limit {
		cluster it-reload
		key {http.request.header.X-App-Id}
		app alpha {
			%s
			burst %d
		}
	}
	respond "{http.rate_limit.remaining}"`, slowApp, burst)
	}
	s := loadSite(t, cfg(10))
	for i := 0; i < 4; i++ {
		if resp, body := s.do("GET", "/b/k", "alpha", ""); resp.StatusCode != 200 || body != strconv.Itoa(9-i) {
			t.Fatalf("before reload, request %d: %d %q", i+1, resp.StatusCode, body)
		}
	}
	s = loadSite(t, cfg(12)) // changed policy, same cluster: a reload
	resp, body := s.do("GET", "/b/k", "alpha", "")
	if resp.StatusCode != 200 || body != "5" {
		t.Errorf("after reload: %d remaining %q, want 5 (the bucket continues, not refilled to 12)", resp.StatusCode, body)
	}
}

func TestIntegrationConflictingClusterDefinitions(t *testing.T) {
	adminOnce.Do(func() { adminPort = testnet.FreePort(t) })
	s := loadSite(t, `respond "ok"`) // make sure the in-process Caddy runs
	p1, p2 := testnet.FreePort(t), testnet.FreePort(t)
	cfg := fmt.Sprintf(`{
	admin localhost:%d
	skip_install_trust
	auto_https off
	persist_config off
}
http://127.0.0.1:%d {
	rate_limit {
		cluster it-conflict
		app alpha {
			guaranteed 10
		}
	}
	respond "a"
}
http://127.0.0.1:%d {
	rate_limit {
		cluster it-conflict
		app alpha {
			guaranteed 20
		}
	}
	respond "b"
}
`, adminPort, p1, p2)
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://localhost:%d/load", adminPort), strings.NewReader(cfg))
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := s.tc.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 || !strings.Contains(string(b), `cluster \"it-conflict\": conflicting definitions`) {
		t.Errorf("conflicting definitions loaded: %d %s", resp.StatusCode, b)
	}
	// the running config is untouched
	if resp, body := s.do("GET", "/", "", ""); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("previous config no longer serves: %d %q", resp.StatusCode, body)
	}
}

// TestIntegrationFailedReloadKeepsPolicy: a reload that fails after this cluster's handler was
// provisioned (a later handler is invalid) leaves the running policy in force.
func TestIntegrationFailedReloadKeepsPolicy(t *testing.T) {
	site := func(burst int) string {
		return fmt.Sprintf(`
	rate_limit {
		headers both
		cluster it-failed-reload
		key {http.request.header.X-App-Id}
		app alpha {
			%s
			burst %d
		}
	}
	respond "ok"`, slowApp, burst)
	}
	s := loadSite(t, site(10))
	if resp, _ := s.do("GET", "/b/k", "alpha", ""); resp.Header.Get("RateLimit-Policy") != `"app";q=10;w=1000` {
		t.Fatalf("initial policy %q", resp.Header.Get("RateLimit-Policy"))
	}
	// the same site with burst 20, then (provisioned after it, in the same route list) a second
	// rate_limit that fails (a shorter path matcher sorts after the longer one): Caddy keeps the
	// running config, and so must the shared buckets
	port := strings.TrimPrefix(s.base, "http://127.0.0.1:")
	cfg := fmt.Sprintf(`{
	admin localhost:%d
	skip_install_trust
	auto_https off
	persist_config off
}
http://127.0.0.1:%s {
	rate_limit /b/* {
		cluster it-failed-reload
		key {http.request.header.X-App-Id}
		headers both
		app alpha {
			%s
			burst 20
		}
	}
	rate_limit /* {
		cluster it-failed-reload-other
		app beta {
			guaranteed 10
			burst 5
		}
	}
	respond "ok"
}
`, adminPort, port, slowApp)
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://localhost:%d/load", adminPort), strings.NewReader(cfg))
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := s.tc.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 200 || !strings.Contains(string(b), `apps[\"beta\"].burst must be`) {
		t.Fatalf("the broken reload loaded: %d %s", resp.StatusCode, b)
	}
	resp2, body := s.do("GET", "/b/k", "alpha", "")
	if resp2.StatusCode != 200 || resp2.Header.Get("RateLimit-Policy") != `"app";q=10;w=1000` {
		t.Errorf("after the failed reload: %d %q, policy %q (want burst 10 still)", resp2.StatusCode, body,
			resp2.Header.Get("RateLimit-Policy"))
	}
}

// TestIntegrationAccessLogPlaceholders: the placeholders reach the access log (log_append),
// which is written after the handler chain has returned.
func TestIntegrationAccessLogPlaceholders(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "access.log")
	s := loadSite(t, `
	log {
		output file `+logFile+`
		format json
	}
	log_append rl_app {http.rate_limit.app}
	log_append rl_decision {http.rate_limit.decision}
	log_append rl_reason {http.rate_limit.reason}
	log_append rl_cost {http.rate_limit.cost}
	log_append rl_remaining {http.rate_limit.remaining}
	rate_limit {
		cluster it-log
		key {http.request.header.X-App-Id}
		app alpha {
			`+slowApp+`
			burst 1
		}
	}
	respond "ok"`)
	s.do("GET", "/b/k", "alpha", "")
	s.do("GET", "/b/k", "alpha", "")
	var b []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ = os.ReadFile(logFile)
		if strings.Count(string(b), "\n") >= 2 {
			break
		}
	}
	log := string(b)
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 2 {
		t.Fatalf("access log:\n%s", log)
	}
	for i, want := range [][]string{
		{`"rl_app":"alpha"`, `"rl_decision":"allowed"`, `"rl_reason":""`, `"rl_cost":"1"`, `"rl_remaining":"0"`},
		{`"rl_app":"alpha"`, `"rl_decision":"rejected"`, `"rl_reason":"app_exhausted"`, `"rl_cost":"1"`, `"rl_remaining":"0"`},
	} {
		for _, field := range want {
			if !strings.Contains(lines[i], field) {
				t.Errorf("access log line %d lacks %s:\n%s", i+1, field, lines[i])
			}
		}
	}
}
