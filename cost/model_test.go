package cost

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// genModel draws a valid model, with small quanta and maxima so that caps are hit often.
func genModel(t *rapid.T) *Model {
	c := Config{
		Quantum:        rapid.Int64Range(1, 1<<20).Draw(t, "quantum"),
		Bandwidth:      Int(rapid.Int64Range(0, 1000).Draw(t, "bandwidth")),
		Max:            rapid.Int64Range(1, 1<<40).Draw(t, "max"),
		StreamEstimate: rapid.Int64Range(0, 1<<30).Draw(t, "stream_estimate"),
		ResponseBytes:  rapid.Bool().Draw(t, "response_bytes"),
		Base:           map[string]int64{"PUT": rapid.Int64Range(0, 1<<20).Draw(t, "base_put")},
	}
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func genBytes(t *rapid.T, label string) int64 {
	return rapid.OneOf(rapid.Int64Range(-10, 1<<24), rapid.Int64Range(math.MinInt64, math.MaxInt64)).Draw(t, label)
}

// ceilUnits is ceil(bytes/quantum) for 0 <= bytes small enough not to overflow.
func ceilUnits(bytes, quantum int64) int64 { return (bytes + quantum - 1) / quantum }

// Property 1: cost = base + ceil(bytes/quantum) × bandwidth, never above max, never negative,
// monotone in bytes.
func TestPropertyCost(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genModel(t)
		c := m.Config()
		op := Operation(rapid.IntRange(0, NumOperations-1).Draw(t, "op"))
		b1, b2 := genBytes(t, "b1"), genBytes(t, "b2")
		if b1 > b2 {
			b1, b2 = b2, b1
		}
		c1, c2 := m.Cost(op, b1), m.Cost(op, b2)
		if c1 < 0 || c2 < 0 || c1 > c.Max || c2 > c.Max {
			t.Fatalf("out of [0, max=%d]: %d %d", c.Max, c1, c2)
		}
		if c1 > c2 {
			t.Fatalf("not monotone: cost(%d)=%d > cost(%d)=%d", b1, c1, b2, c2)
		}
		if b1 >= 0 && b1 <= 1<<24 { // exact formula where it cannot overflow
			want := min(m.Base(op)+ceilUnits(b1, c.Quantum)*(*c.Bandwidth), c.Max)
			if c1 != want {
				t.Fatalf("cost(%v, %d) = %d, want %d", op, b1, c1, want)
			}
		}
		if b1 < 0 && c1 != min(m.Base(op), c.Max) {
			t.Fatalf("negative bytes: cost %d, want base %d", c1, m.Base(op))
		}
	})
}

// Property 9: settlement adjusts by estimate − actual.
func TestPropertySettle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genModel(t)
		c := m.Config()
		op := rapid.SampledFrom([]Operation{OpPut, OpPost, OpGet, OpMultipartUpload}).Draw(t, "op")
		declared := rapid.Int64Range(-1, 1<<30).Draw(t, "declared")
		e := Estimate{Op: op, Declared: declared, Streaming: declared < 0}
		if e.Streaming {
			e.Cost = m.Cost(op, c.StreamEstimate)
		} else {
			e.Cost = m.Cost(op, declared)
		}
		read := rapid.Int64Range(0, 1<<31).Draw(t, "read")
		if !e.Streaming && read > declared && rapid.Bool().Draw(t, "short") {
			read = rapid.Int64Range(0, declared).Draw(t, "shortRead")
		}
		resp := genBytes(t, "resp")

		got := m.Settle(e, Usage{BodyBytes: read, ResponseBytes: resp})
		if got < 0 || got > c.Max {
			t.Fatalf("settle %d outside [0, %d]", got, c.Max)
		}
		var body int64 // what Settle must charge for the request body
		switch {
		case e.Streaming:
			body = m.Cost(op, read)
		case read < declared:
			body = m.Cost(op, read)
			// The refund is exactly the unread quanta (until the cap interferes).
			if e.Cost < c.Max {
				refund := (ceilUnits(declared, c.Quantum) - ceilUnits(read, c.Quantum)) * *c.Bandwidth
				if e.Cost-body != refund {
					t.Fatalf("refund %d, want %d unread quanta", e.Cost-body, refund)
				}
			}
		default:
			body = e.Cost // fully read; extra bytes are ignored
		}
		want := body
		if c.ResponseBytes {
			want = m.addBytes(body, resp)
			if resp >= 0 && resp <= 1<<24 {
				if w := min(body+ceilUnits(resp, c.Quantum)*(*c.Bandwidth), c.Max); want != w {
					t.Fatalf("response bytes: %d, want %d", want, w)
				}
			}
		}
		if got != want {
			t.Fatalf("settle = %d, want %d (estimate %+v, read %d, resp %d)", got, want, e, read, resp)
		}
		if !c.ResponseBytes && !e.Streaming && got > e.Cost {
			t.Fatalf("declared body settled above its estimate: %d > %d", got, e.Cost)
		}
	})
}

func TestEstimate(t *testing.T) {
	m := mustNew(t, Config{Quantum: 1000, StreamEstimate: 10_000})

	r := httptest.NewRequest("PUT", "/b/k?partNumber=1&uploadId=x", strings.NewReader("0123456789"))
	r.ContentLength = 2500
	if e := m.Estimate(r); e != (Estimate{Op: OpMultipartUpload, Cost: 4 + 3, Declared: 2500}) {
		t.Errorf("declared: %+v", e)
	}

	r = httptest.NewRequest("PUT", "/b/k", strings.NewReader("chunked"))
	r.ContentLength = -1
	if e := m.Estimate(r); e != (Estimate{Op: OpPut, Cost: 5 + 10, Declared: -1, Streaming: true}) {
		t.Errorf("streaming: %+v", e)
	}

	// A GET over HTTP/3 has no Content-Length and a body (empty): no stream_estimate for it,
	// and a body it does send is charged as read.
	for _, method := range []string{"GET", "HEAD", "DELETE", "OPTIONS", "TRACE"} {
		r = httptest.NewRequest(method, "/b/k", strings.NewReader(""))
		r.ContentLength = -1
		e := m.Estimate(r)
		if e.Cost != m.Base(e.Op) || !e.Streaming {
			t.Errorf("%s without a length: %+v, want the base cost %d, streaming", method, e, m.Base(e.Op))
		}
		if got := m.Settle(e, Usage{BodyBytes: 2500}); got != m.Base(e.Op)+3 {
			t.Errorf("%s with a 2500-byte body: settled %d", method, got)
		}
	}

	for _, body := range []io.ReadCloser{nil, http.NoBody} {
		r = httptest.NewRequest("GET", "/b/k", nil)
		r.ContentLength, r.Body = -1, body
		if e := m.Estimate(r); e != (Estimate{Op: OpGet, Cost: 1}) {
			t.Errorf("no body (%T): %+v", body, e)
		}
	}
}

func TestAbsurdContentLength(t *testing.T) {
	for _, bw := range []int64{1, 1000, math.MaxInt64} {
		m := mustNew(t, Config{Quantum: 1, Bandwidth: Int(bw)})
		r := httptest.NewRequest("PUT", "/b/k", nil)
		for _, n := range []int64{1 << 62, math.MaxInt64} {
			r.ContentLength = n
			if e := m.Estimate(r); e.Cost != DefaultMax {
				t.Errorf("bandwidth %d, Content-Length %d: cost %d, want max %d", bw, n, e.Cost, DefaultMax)
			}
		}
		e := m.Estimate(r)
		if got := m.Settle(e, Usage{BodyBytes: math.MaxInt64, ResponseBytes: math.MaxInt64}); got != DefaultMax {
			t.Errorf("settle of absurd sizes: %d", got)
		}
	}
}

func TestSettleExamples(t *testing.T) {
	m := mustNew(t, Config{Quantum: 100, StreamEstimate: 1000, ResponseBytes: true, Max: 50})
	put := Estimate{Op: OpPut, Cost: 5 + 10, Declared: 1000}
	tests := []struct {
		name       string
		e          Estimate
		read, resp int64
		want       int64
	}{
		{"declared fully read", put, 1000, 0, 15},
		{"declared over-read ignored", put, 5000, 0, 15},
		{"declared short refunds", put, 250, 0, 8},
		{"declared nothing read", put, 0, 0, 5},
		{"streaming small", Estimate{Op: OpPut, Cost: 15, Declared: -1, Streaming: true}, 101, 0, 7},
		{"streaming large capped", Estimate{Op: OpPut, Cost: 15, Declared: -1, Streaming: true}, 1 << 40, 0, 50},
		{"response bytes", Estimate{Op: OpGet, Cost: 1}, 0, 1000, 11},
		{"response bytes capped", Estimate{Op: OpGet, Cost: 1}, 0, 1 << 62, 50},
		{"negative response", Estimate{Op: OpGet, Cost: 1}, 0, -7, 1},
	}
	for _, tt := range tests {
		if got := m.Settle(tt.e, Usage{BodyBytes: tt.read, ResponseBytes: tt.resp}); got != tt.want {
			t.Errorf("%s: settle = %d, want %d", tt.name, got, tt.want)
		}
	}
	off := mustNew(t, Config{Quantum: 100})
	if got := off.Settle(Estimate{Op: OpGet, Cost: 1}, Usage{BodyBytes: 0, ResponseBytes: 1 << 20}); got != 1 || off.ResponseBytes() {
		t.Errorf("response_bytes off: settle %d, flag %v", got, off.ResponseBytes())
	}
}

func TestCountingBody(t *testing.T) {
	src := io.NopCloser(bytes.NewReader(make([]byte, 12345)))
	b := GetCountingBody(src)
	if n, err := io.Copy(io.Discard, b); err != nil || n != 12345 || b.N() != 12345 {
		t.Fatalf("copied %d (%v), counted %d", n, err, b.N())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.Reset(io.NopCloser(strings.NewReader("abc")))
	if b.N() != 0 {
		t.Fatalf("Reset kept count %d", b.N())
	}
	p := make([]byte, 2)
	if n, _ := b.Read(p); n != 2 || b.N() != 2 {
		t.Fatalf("read %d, counted %d", n, b.N())
	}
	PutCountingBody(b)
	if NewCountingBody(http.NoBody).N() != 0 {
		t.Fatal("new body has a count")
	}
}

// TestAwsChunked: an S3 upload in aws-chunked framing is charged its payload, not its framing.
// The wire sizes are boto3 1.43's over HTTPS (1 MiB chunks, a CRC32 trailer, Transfer-Encoding
// chunked, no Content-Length): 64 KiB of payload is 65 581 bytes on the wire, 1 MiB 1 048 622.
func TestAwsChunked(t *testing.T) {
	m := mustNew(t, Config{}) // quantum 64 KiB, PUT base 5
	put := func(contentLength int64, decoded string, marks ...string) Estimate {
		r := httptest.NewRequest("PUT", "/b/k", strings.NewReader("body"))
		r.ContentLength = contentLength
		for i := 0; i+1 < len(marks); i += 2 {
			r.Header.Set(marks[i], marks[i+1])
		}
		if decoded != "" {
			r.Header.Set("X-Amz-Decoded-Content-Length", decoded)
		}
		return m.Estimate(r)
	}
	const ce, sha = "Content-Encoding", "X-Amz-Content-Sha256"
	tests := []struct {
		name      string
		e         Estimate
		read      int64
		estimate  int64 // the cost taken up front
		settled   int64 // the cost after read wire bytes
		plainWire int64 // what the wire bytes cost as a plain body (Model.Cost, framing included)
	}{
		{"boto3 64 KiB, streaming", put(-1, "65536", ce, "aws-chunked", sha, "STREAMING-UNSIGNED-PAYLOAD-TRAILER"), 65581, 6, 6, 7},
		{"boto3 1 MiB, streaming", put(-1, "1048576", ce, "aws-chunked"), 1048622, 21, 21, 22},
		{"SigV4 64 KiB chunks, declared", put(1<<20+1450, "1048576", sha, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"), 1<<20 + 1450, 21, 21, 22},
		{"aborted half way: what arrived", put(-1, "1048576", ce, "aws-chunked"), 500_000, 21, 5 + 8, 5 + 8},
		{"a false payload length: every wire byte", put(1<<30, "0", ce, "aws-chunked"), 1 << 30, 5 + 16384, 5 + 16384, 5 + 16384},
		{"framing beyond 1/64 + 1 KiB: every wire byte", put(-1, "65536", ce, "aws-chunked"), 65536 + 65536/64 + 1024 + 2000, 6, 7, 7},
		{"payload length without aws-chunked: ignored", put(-1, "65536"), 65581, 5 + 16, 7, 7},
		{"unparsable payload length: ignored", put(-1, "64k", ce, "aws-chunked"), 65581, 5 + 16, 7, 7},
		{"gzip, aws-chunked", put(-1, "65536", ce, "gzip, aws-chunked"), 65581, 6, 6, 7},
	}
	for _, tt := range tests {
		if tt.e.Cost != tt.estimate {
			t.Errorf("%s: estimate %d, want %d (%+v)", tt.name, tt.e.Cost, tt.estimate, tt.e)
		}
		if got := m.Settle(tt.e, Usage{BodyBytes: tt.read}); got != tt.settled {
			t.Errorf("%s: settled %d, want %d", tt.name, got, tt.settled)
		}
		if got := m.Cost(OpPut, tt.read); got != tt.plainWire {
			t.Errorf("%s: the wire bytes cost %d, want %d", tt.name, got, tt.plainWire)
		}
	}

	// As bytes arrive the charge never goes down (the body charges as it is read).
	e := put(-1, "1048576", ce, "aws-chunked")
	prev := int64(0)
	for read := int64(0); read <= 1<<21; read += 997 {
		c := m.Settle(e, Usage{BodyBytes: read})
		if c < prev {
			t.Fatalf("charge went down from %d to %d at %d bytes read", prev, c, read)
		}
		prev = c
	}

	// `operations http` charges the wire: it counts request bytes, whatever they carry.
	h := mustNew(t, Config{Operations: "http"})
	r := httptest.NewRequest("PUT", "/b/k", strings.NewReader("body"))
	r.ContentLength = -1
	r.Header.Set(ce, "aws-chunked")
	r.Header.Set("X-Amz-Decoded-Content-Length", "65536")
	if e := h.Estimate(r); e.Chunked || h.Settle(e, Usage{BodyBytes: 65581}) != 7 {
		t.Errorf("operations http: %+v settled %d, want the wire's 7", e, h.Settle(e, Usage{BodyBytes: 65581}))
	}
}
