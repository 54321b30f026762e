package tierbucket

import (
	"context"
	"encoding/xml"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tierbucket/caddy-tierbucket/internal/response"
)

// s3ErrorBody is S3's error document.
type s3ErrorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource"`
	RequestID string   `xml:"RequestId"`
}

func s3Handler(t *testing.T, cluster, unknown string, errorsMode bool) *Handler {
	return newTestHandler(t, &Handler{
		Cluster:    cluster,
		Key:        "{http.request.header.X-App-Id}",
		Apps:       map[string]*AppConfig{"a": {Guaranteed: 1, Burst: 2}, "off": {Guaranteed: 1, Disabled: true}},
		UnknownApp: unknown,
		Format:     response.FormatS3,
		Errors:     errorsMode,
	})
}

var okNext = caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
	w.WriteHeader(http.StatusOK)
	return nil
})

// format s3: every rejection is an S3 error document with the status, code and headers S3
// itself would send.
func TestFormatS3Rejections(t *testing.T) {
	h := s3Handler(t, "unit-s3", "reject", false)
	serve := func(method, app, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://gw.example"+path, nil)
		if app != "" {
			r.Header.Set("X-App-Id", app)
		}
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, okNext); err != nil {
			t.Fatal(err)
		}
		return w
	}
	for range 2 { // the burst
		if w := serve("GET", "a", "/b/o"); w.Code != http.StatusOK {
			t.Fatalf("within the burst: %d", w.Code)
		}
	}
	cases := []struct {
		name, method, app, path string
		status                  int
		code                    string
		retry                   bool
	}{
		{"throttled", "GET", "a", "/bucket/a&b<c>.txt", http.StatusServiceUnavailable, "SlowDown", true},
		{"unknown app", "GET", "nobody", "/b/o", http.StatusForbidden, "AccessDenied", false},
		{"disabled app", "GET", "off", "/b/o", http.StatusForbidden, "AccessDenied", false},
		{"invalid id", "GET", "", "/b/o", http.StatusBadRequest, "InvalidArgument", false},
	}
	ids := map[string]bool{}
	for _, c := range cases {
		w := serve(c.method, c.app, c.path)
		if w.Code != c.status || w.Header().Get("Content-Type") != "application/xml" {
			t.Fatalf("%s: %d %q, want %d application/xml", c.name, w.Code, w.Header().Get("Content-Type"), c.status)
		}
		var e s3ErrorBody
		if err := xml.Unmarshal(w.Body.Bytes(), &e); err != nil {
			t.Fatalf("%s: body %q: %v", c.name, w.Body.String(), err)
		}
		if e.Code != c.code || e.Resource != c.path || len(e.RequestID) != 16 || e.Message == "" {
			t.Fatalf("%s: %+v", c.name, e)
		}
		if w.Header().Get("X-Amz-Request-Id") != e.RequestID || ids[e.RequestID] {
			t.Fatalf("%s: request id %q (header %q) not unique or not in the header", c.name, e.RequestID, w.Header().Get("X-Amz-Request-Id"))
		}
		ids[e.RequestID] = true
		secs, err1 := strconv.Atoi(w.Header().Get("Retry-After"))
		ms, err2 := strconv.Atoi(w.Header().Get("X-Amz-Retry-After"))
		if c.retry && (err1 != nil || err2 != nil || secs < 1 || ms < 1) {
			t.Fatalf("%s: Retry-After %q, x-amz-retry-after %q", c.name, w.Header().Get("Retry-After"), w.Header().Get("X-Amz-Retry-After"))
		}
		if !c.retry && w.Header().Get("X-Amz-Retry-After") != "" {
			t.Fatalf("%s: x-amz-retry-after on a rejection that waiting does not cure", c.name)
		}
	}
	// The same rate-limit headers as json (the default: draft's, the policy on rejections).
	if w := serve("GET", "a", "/b/o"); w.Header().Get("RateLimit-Policy") == "" || w.Header().Get("RateLimit") == "" {
		t.Fatalf("rate-limit headers missing: %v", w.Header())
	}
	// HEAD: the status and headers, no body.
	if w := serve("HEAD", "a", "/b/o"); w.Code != http.StatusServiceUnavailable || w.Body.Len() != 0 {
		t.Fatalf("HEAD: %d with a %d-byte body", w.Code, w.Body.Len())
	}
}

// format s3 with errors: handle_errors gets S3's status, and the response the S3 throttle headers.
func TestFormatS3Errors(t *testing.T) {
	h := s3Handler(t, "unit-s3-errors", "shared", true)
	var last error
	var w *httptest.ResponseRecorder
	for range 3 {
		r := httptest.NewRequest("GET", "http://gw.example/b/o", nil)
		r.Header.Set("X-App-Id", "a")
		w = httptest.NewRecorder()
		last = h.ServeHTTP(w, r, okNext)
	}
	var he caddyhttp.HandlerError
	if !errors.As(last, &he) || he.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("errors mode: %v, want a handler error with status 503", last)
	}
	// handle_errors writes the body; the throttle headers are the handler's, as without errors
	for _, name := range []string{"Retry-After", "X-Amz-Retry-After", "X-Amz-Request-Id"} {
		if w.Header().Get(name) == "" {
			t.Errorf("errors mode: no %s header (headers %v)", name, w.Header())
		}
	}
}

func TestFormatValidated(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := &Handler{Format: "xml"}
	err := h.setup(ctx)
	if err == nil || !strings.Contains(err.Error(), "format") {
		t.Fatalf("format xml: %v, want an error naming format", err)
	}
}
