package ratelimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// serveOne sends GET / with the app in X-App-Id through h and returns the recorded answer.
func serveOne(h http.Handler, app string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-App-Id", app)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func byHeader(r *http.Request) string { return r.Header.Get("X-App-Id") }

// TestMiddlewareResponses: the plugin's answers with its default options: admitted responses
// carry no rate-limit header; a spent app is 429 with the JSON body and the RateLimit,
// RateLimit-Policy and Retry-After headers; an invalid key 400, an unknown app under reject
// 403, each with its reason.
func TestMiddlewareResponses(t *testing.T) {
	l := newLimiter(t, Options{UnknownApp: UnknownReject, Apps: map[string]App{"a": slowApp(2)}})
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	h := Middleware(l, byHeader, ok)

	for i := range 2 {
		rec := serveOne(h, "a")
		if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
			t.Fatalf("request %d: %d %q", i, rec.Code, rec.Body)
		}
		for _, f := range []string{"Ratelimit", "Ratelimit-Policy", "Retry-After"} {
			if v := rec.Header().Get(f); v != "" {
				t.Errorf("admitted response has %s: %q", f, v)
			}
		}
	}
	rec := serveOne(h, "a")
	want := `{"error":"rate_limit_exceeded","reason":"app_exhausted","retry_after":1000,"remaining":0,"cost":1}` + "\n"
	if rec.Code != http.StatusTooManyRequests || rec.Body.String() != want {
		t.Errorf("spent app: %d %q, want 429 %q", rec.Code, rec.Body, want)
	}
	for f, v := range map[string]string{
		"Content-Type":     "application/json",
		"Ratelimit":        `"app";r=0;t=1000`,
		"Ratelimit-Policy": `"app";q=2;w=2000`,
		"Retry-After":      "1000",
	} {
		if got := rec.Header().Get(f); got != v {
			t.Errorf("spent app: %s %q, want %q", f, got, v)
		}
	}

	for _, tc := range []struct {
		app    string
		status int
		reason string
	}{
		{"", http.StatusBadRequest, "invalid_app_id"},
		{"not valid", http.StatusBadRequest, "invalid_app_id"},
		{"stranger", http.StatusForbidden, "unknown_app"},
	} {
		rec := serveOne(h, tc.app)
		want := `{"error":"rate_limit_exceeded","reason":"` + tc.reason + `","retry_after":0,"remaining":0,"cost":1}` + "\n"
		if rec.Code != tc.status || rec.Body.String() != want {
			t.Errorf("app %q: %d %q, want %d %q", tc.app, rec.Code, rec.Body, tc.status, want)
		}
		if v := rec.Header().Get("Retry-After"); v != "" {
			t.Errorf("app %q: Retry-After %q on a refusal that waiting cannot cure", tc.app, v)
		}
	}
}

// TestMiddlewareGivesBackOn429: a request that the next handler answers with 429 gets its
// token back; any other answer keeps it charged.
func TestMiddlewareGivesBackOn429(t *testing.T) {
	l := newLimiter(t, Options{Apps: map[string]App{"a": slowApp(1)}})
	status := http.StatusTooManyRequests
	h := Middleware(l, byHeader, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	for i := range 3 {
		if rec := serveOne(h, "a"); rec.Code != http.StatusTooManyRequests || rec.Body.Len() != 0 {
			t.Fatalf("request %d: %d %q, want the next handler's bare 429: the token was not given back", i, rec.Code, rec.Body)
		}
	}
	status = http.StatusOK
	if rec := serveOne(h, "a"); rec.Code != http.StatusOK {
		t.Fatalf("the one token: %d %q", rec.Code, rec.Body)
	}
	if rec := serveOne(h, "a"); rec.Code != http.StatusTooManyRequests || rec.Body.Len() == 0 {
		t.Errorf("after a 200 the token stays spent: %d %q, want the limiter's 429", rec.Code, rec.Body)
	}
}

// TestMiddlewareHoldsSlot: a request holds its app's in-flight slot while the next handler
// runs: a request arriving meanwhile is 429 app_limit_exceeded; the slot is free afterwards.
func TestMiddlewareHoldsSlot(t *testing.T) {
	l := newLimiter(t, Options{Apps: map[string]App{"a": {Guaranteed: 1000, MaxConnections: 1}}})
	var inner *httptest.ResponseRecorder
	var h http.Handler
	h = Middleware(l, byHeader, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Nested") == "" {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Header.Set("X-App-Id", "a")
			req.Header.Set("X-Nested", "1")
			inner = httptest.NewRecorder()
			h.ServeHTTP(inner, req)
		}
	}))
	if rec := serveOne(h, "a"); rec.Code != http.StatusOK {
		t.Fatalf("outer request: %d %q", rec.Code, rec.Body)
	}
	want := `{"error":"rate_limit_exceeded","reason":"app_limit_exceeded","retry_after":1,"remaining":`
	if inner.Code != http.StatusTooManyRequests || len(inner.Body.String()) < len(want) || inner.Body.String()[:len(want)] != want {
		t.Errorf("a request while the slot is held: %d %q, want 429 starting %q", inner.Code, inner.Body, want)
	}
	if rec := serveOne(h, "a"); rec.Code != http.StatusOK || inner.Code != http.StatusTooManyRequests {
		t.Errorf("after the first request ended: %d", rec.Code)
	}
}

// TestMiddlewareNilArguments: a Middleware built without a Limiter, key function or handler
// answers 500 with the error, and never panics.
func TestMiddlewareNilArguments(t *testing.T) {
	l := newLimiter(t, Options{})
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("next was called") })
	for name, h := range map[string]http.Handler{
		"limiter": Middleware(nil, byHeader, ok),
		"key":     Middleware(l, nil, ok),
		"next":    Middleware(l, byHeader, nil),
	} {
		rec := serveOne(h, "a")
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), ErrMiddlewareArgs.Error()) {
			t.Errorf("nil %s: %d %q", name, rec.Code, rec.Body)
		}
	}
}
