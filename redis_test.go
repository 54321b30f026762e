package tierbucket

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// TestRedisStoreWired: with a redis block the handler leases from Redis (the app's L2 key
// appears under the configured prefix) and enforces the burst; the password is read from an
// {env.*} placeholder.
func TestRedisStoreWired(t *testing.T) {
	addr, _ := redistest.Standalone(t)
	t.Setenv("TIERBUCKET_TEST_REDIS_ADDR", addr)
	h := newTestHandler(t, &Handler{
		Cluster: "unit-redis",
		Key:     "{http.request.header.X-App-Id}",
		Apps:    map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 4}},
		Redis: &RedisConfig{Config: redislua.Config{
			Address:   []string{"{env.TIERBUCKET_TEST_REDIS_ADDR}"},
			KeyPrefix: "rltest",
		}},
	})
	if h.state.Key().Store == "memory" {
		t.Fatal("the memory store is used despite the redis block")
	}
	var codes []int
	for i := 0; i < 5; i++ {
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, get("a"), nopNext); err != nil {
			t.Fatal(err)
		}
		codes = append(codes, w.Code)
	}
	if want := []int{200, 200, 200, 200, 429}; !equalInts(codes, want) {
		t.Errorf("statuses %v, want %v", codes, want)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "rltest:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range keys {
		if k == "rltest:{unit-redis/a}:l2" {
			found = true
		}
	}
	if !found {
		t.Errorf("no L2 key for the app in Redis; keys: %v", keys)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRedisDownClosedMode: with on_redis_failure closed, a request the local tokens cannot
// cover while Redis is down gets 503 redis_unavailable.
func TestRedisDownClosedMode(t *testing.T) {
	addr, srv := redistest.Standalone(t)
	h := newTestHandler(t, &Handler{
		Cluster:        "unit-redis-closed",
		Key:            "{http.request.header.X-App-Id}",
		Apps:           map[string]*AppConfig{"a": {Guaranteed: 0.001, Burst: 1}},
		Redis:          &RedisConfig{Config: redislua.Config{Address: []string{addr}}},
		OnRedisFailure: "closed",
	})
	w := httptest.NewRecorder()
	_ = h.ServeHTTP(w, get("a"), nopNext)
	if w.Code != 200 {
		t.Fatalf("first request %d", w.Code)
	}
	srv.Stop()
	// the bucket is empty and the Store is gone: the next lease fails, closed mode answers 503
	sawUnavailable := false
	for i := 0; i < 20 && !sawUnavailable; i++ {
		w = httptest.NewRecorder()
		_ = h.ServeHTTP(w, get("a"), nopNext)
		switch w.Code {
		case 503:
			sawUnavailable = strings.Contains(w.Body.String(), `"reason":"redis_unavailable"`)
			if !sawUnavailable {
				t.Fatalf("503 body %s", w.Body)
			}
		case 429:
		default:
			t.Fatalf("request with Redis down: %d %s", w.Code, w.Body)
		}
	}
	if !sawUnavailable {
		t.Fatal("no 503 redis_unavailable while Redis was down")
	}
}

// A credential whose placeholder names an unset variable is an error naming the field, not an
// empty credential: an empty password reaches Redis as its default user.
func TestRedisUnsetPlaceholder(t *testing.T) {
	t.Setenv("TIERBUCKET_TEST_PW", "")
	for _, c := range []struct {
		field string
		cfg   RedisConfig
	}{
		{"password", RedisConfig{Config: redislua.Config{Address: []string{"a:1"}, Username: "caddy", Password: "{env.TIERBUCKET_TEST_PW}"}}},
		{"password", RedisConfig{Config: redislua.Config{Address: []string{"a:1"}, Password: "{env.TIERBUCKET_TEST_UNSET_PW}"}}},
		{"sentinel_password", RedisConfig{Config: redislua.Config{Address: []string{"a:1"}, Sentinel: "m", SentinelPassword: "{env.TIERBUCKET_TEST_PW}"}}},
	} {
		_, err := c.cfg.resolve(nil)
		if err == nil || !strings.HasPrefix(err.Error(), "redis."+c.field+" is empty once its placeholders are replaced") {
			t.Errorf("%s: %v", c.field, err)
		}
	}
	t.Setenv("TIERBUCKET_TEST_PW", "set")
	ok := RedisConfig{Config: redislua.Config{Address: []string{"a:1"}, Username: "caddy", Password: "{env.TIERBUCKET_TEST_PW}"}}
	if rc, err := ok.resolve(nil); err != nil || rc.Password != "set" {
		t.Errorf("a set variable: %v", err)
	}
}
