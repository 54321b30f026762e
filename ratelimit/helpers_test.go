package ratelimit

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var prefixSeq atomic.Int64

// uniquePrefix keeps the tests that share one redis-server apart.
func uniquePrefix() string { return "rl" + strconv.FormatInt(prefixSeq.Add(1), 10) }

// newLimiter is New(o) that fails the test on an error and closes the Limiter at its end.
func newLimiter(t *testing.T, o Options) *Limiter {
	t.Helper()
	l, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// slowApp refills one token per 1000 s: within a test, what it admits is its burst.
func slowApp(burst float64) App { return App{Guaranteed: 0.001, Burst: burst} }
