package cost

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func benchRequests() []*http.Request {
	put := httptest.NewRequest("PUT", "/bucket/some/object.bin?partNumber=3&uploadId=2~abcdefghijklmnop", nil)
	put.ContentLength = 5 << 20
	get := httptest.NewRequest("GET", "/bucket/some/object.bin", nil)
	return []*http.Request{put, get}
}

func BenchmarkClassify(b *testing.B) {
	m := mustNew(b, Config{})
	rs := benchRequests()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = m.Classify(rs[i&1])
	}
}

func BenchmarkEstimate(b *testing.B) {
	m := mustNew(b, Config{})
	rs := benchRequests()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = m.Estimate(rs[i&1])
	}
}

// TestZeroAllocs guards the hot path against allocations in plain `go test` runs too.
func TestZeroAllocs(t *testing.T) {
	m := mustNew(t, Config{})
	rs := append(benchRequests(), req("put", "/b/k", "X-Amz-Copy-Source", "/a/b"), req("GET", "/b?list-type=2&prefix=x"))
	for _, r := range rs {
		if n := testing.AllocsPerRun(100, func() {
			e := m.Estimate(r)
			_ = m.Settle(e, Usage{BodyBytes: 10, ResponseBytes: 10})
		}); n != 0 {
			t.Errorf("%s %s: %v allocs", r.Method, r.URL, n)
		}
	}
	cb := NewCountingBody(http.NoBody)
	if n := testing.AllocsPerRun(100, func() { PutCountingBody(GetCountingBody(http.NoBody)); cb.Reset(http.NoBody) }); n != 0 {
		t.Errorf("counting body pool: %v allocs", n)
	}
}
