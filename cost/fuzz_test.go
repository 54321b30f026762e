package cost

import (
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Fuzz targets of the request → cost path (the cost model of docs/configuration.md, `cost`). Requests are built by hand, not with
// httptest.NewRequest, so that any method, path and raw query reaches the model, including ones
// no URL parser would produce. Seeds: the f.Add calls and testdata/fuzz/<target>/. By hand:
//
//	go test -run '^$' -fuzz '^FuzzEstimate$' -fuzztime 1m ./cost/

// fuzzRequest builds the request the model sees.
func fuzzRequest(method, path, rawQuery string, copySource bool, contentLength int64, body bool) *http.Request {
	return fuzzChunkedRequest(method, path, rawQuery, copySource, contentLength, body, 0, "")
}

// Ways an S3 client marks an aws-chunked body (fuzzChunkedRequest's chunked argument, mod 4).
const (
	chunkedNone           = iota
	chunkedEncoding       // Content-Encoding: aws-chunked
	chunkedStreamingSHA   // x-amz-content-sha256: STREAMING-…
	chunkedDecodedOnlyHdr // only x-amz-decoded-content-length: not aws-chunked
)

// fuzzChunkedRequest is fuzzRequest with an aws-chunked marking and a declared payload length
// (decodedHeader, sent when not empty).
func fuzzChunkedRequest(method, path, rawQuery string, copySource bool, contentLength int64, body bool,
	chunked uint8, decodedHeader string,
) *http.Request {
	r := &http.Request{
		Method:        method,
		URL:           &url.URL{Path: path, RawQuery: rawQuery},
		Header:        http.Header{},
		ContentLength: contentLength,
	}
	if copySource {
		r.Header.Set("x-amz-copy-source", "/src/"+path)
	}
	switch chunked % 4 {
	case chunkedEncoding:
		r.Header.Set("Content-Encoding", "aws-chunked")
	case chunkedStreamingSHA:
		r.Header.Set("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
	}
	if decodedHeader != "" {
		r.Header.Set("X-Amz-Decoded-Content-Length", decodedHeader)
	}
	if body {
		r.Body = io.NopCloser(strings.NewReader(""))
	} else if contentLength != 0 {
		r.Body = http.NoBody
	}
	return r
}

// fuzzMethodOp is `operations http`: the method name, case-insensitive; "" is GET; anything
// else OTHER.
func fuzzMethodOp(method string) Operation {
	if method == "" {
		return OpGet
	}
	switch strings.ToUpper(method) {
	case "GET":
		return OpGet
	case "HEAD":
		return OpHead
	case "PUT":
		return OpPut
	case "POST":
		return OpPost
	case "PATCH":
		return OpPatch
	case "DELETE":
		return OpDelete
	}
	return OpOther
}

// fuzzS3Op is the documented S3 classification, stated independently of Classify.
func fuzzS3Op(method, path, rawQuery string, copySource bool) Operation {
	var keys []string
	for _, kv := range strings.Split(rawQuery, "&") {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	has := func(k string) bool { return slices.Contains(keys, k) }
	_, objectKey, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	switch op := fuzzMethodOp(method); op {
	case OpGet:
		if objectKey == "" || has("list-type") || has("prefix") || has("delimiter") {
			return OpList
		}
		return OpGet
	case OpPut:
		switch {
		case copySource:
			return OpCopy
		case has("partNumber") && has("uploadId"):
			return OpMultipartUpload
		}
		return OpPut
	case OpPost:
		switch {
		case has("uploads"):
			return OpMultipartInit
		case has("uploadId"):
			return OpMultipartComplete
		case has("delete"):
			return OpDeleteObjects
		}
		return OpPost
	case OpDelete:
		if has("uploadId") {
			return OpMultipartAbort
		}
		return OpDelete
	default:
		return op
	}
}

// fuzzBaseOf is the base cost of op under c (defaults applied), from the documented base-cost table.
func fuzzBaseOf(c Config, op Operation) int64 {
	table := map[Operation]int64{
		OpGet: 1, OpHead: 1, OpPut: 5, OpPost: 5, OpPatch: 3, OpDelete: 2,
		OpList: 3, OpCopy: 6, OpMultipartInit: 2, OpMultipartUpload: 4, OpMultipartComplete: 8,
		OpMultipartAbort: 3, OpDeleteObjects: 2, OpOther: *c.Default,
	}
	b := table[op]
	for name, v := range c.Base {
		if o, _ := ParseOperation(name); o == op {
			b = v
		}
	}
	return b
}

// fuzzCost is min(base + ceil(max(bytes, 0)/quantum) × bandwidth, max) in exact arithmetic.
func fuzzCost(c Config, base, bytes int64) int64 {
	v := big.NewInt(base)
	if bytes > 0 {
		q := big.NewInt(c.Quantum)
		units := new(big.Int).Add(big.NewInt(bytes), new(big.Int).Sub(q, big.NewInt(1)))
		units.Quo(units, q)
		v.Add(v, units.Mul(units, big.NewInt(*c.Bandwidth)))
	}
	if v.Cmp(big.NewInt(c.Max)) > 0 {
		return c.Max
	}
	return v.Int64()
}

// fuzzConfig prints a config with its pointer fields' values.
func fuzzConfig(c Config) string {
	deref := func(p *int64) any {
		if p == nil {
			return "unset"
		}
		return *p
	}
	return fmt.Sprintf("{operations %s quantum %d bandwidth %v max %d default %v base %v stream_estimate %d response_bytes %v}",
		c.Operations, c.Quantum, deref(c.Bandwidth), c.Max, deref(c.Default), c.Base, c.StreamEstimate, c.ResponseBytes)
}

// fuzzCheckClassify checks Classify on one request under both operation modes.
func fuzzCheckClassify(t *testing.T, s3, plain *Model, method, path, rawQuery string, copySource bool, r *http.Request) {
	t.Helper()
	for _, m := range []*Model{s3, plain} {
		if op := m.Classify(r); int(op) >= NumOperations || op.String() == "" {
			t.Fatalf("Classify(%q %q ? %q) = unknown operation %d", method, path, rawQuery, op)
		}
	}
	if got, want := plain.Classify(r), fuzzMethodOp(method); got != want {
		t.Fatalf("operations http: Classify(%q) = %v, want %v", method, got, want)
	}
	if got, want := s3.Classify(r), fuzzS3Op(method, path, rawQuery, copySource); got != want {
		t.Fatalf("operations s3: Classify(%q %q ? %q, copy source %v) = %v, want %v",
			method, path, rawQuery, copySource, got, want)
	}
}

// FuzzClassify: any method, path, raw query and x-amz-copy-source presence. Properties: no
// panic; the operation is a known one; with `operations http` it is the method name (OTHER for
// any other method); with `operations s3` it is what the documented S3 rules say.
func FuzzClassify(f *testing.F) {
	for _, s := range []struct {
		method, path, query string
		copySource          bool
	}{
		{"GET", "/b/k", "", false},
		{"GET", "/b", "", false},
		{"GET", "/", "", false},
		{"GET", "", "", false},
		{"GET", "/b/k", "list-type=2", false},
		{"GET", "/b/k", "x=prefix&delimiter", false},
		{"get", "b/k", "", false},
		{"", "/b/k", "prefix", false},
		{"HEAD", "/b", "", false},
		{"PUT", "/b/k", "", true},
		{"PUT", "/b/k", "partNumber=1&uploadId=x", false},
		{"PUT", "/b/k", "partnumber=1&uploadid=x", false},
		{"put", "/b/k", "uploadId&partNumber", true},
		{"POST", "/b/k", "uploads", false},
		{"POST", "/b/k", "uploadId=x&uploads=", false},
		{"POST", "/b/k", "uploadId=x", false},
		{"DELETE", "/b/k", "uploadId=x", false},
		{"PATCH", "/b/k", "", false},
		{"OPTIONS", "/b/k", "uploads", true},
		{"BREW", "//", "&&=&", false},
		{"P\u017fT", "/b/k", "", false},
		{"GET\x00", "/b/\x00", "prefix\x00", false},
		{"\xff\xfe", "\xff/\xff", "%zz&;;", true},
		{strings.Repeat("G", 300), strings.Repeat("/", 300), strings.Repeat("&", 300), false},
	} {
		f.Add(s.method, s.path, s.query, s.copySource)
	}
	s3 := mustNew(f, Config{})
	plain := mustNew(f, Config{Operations: "http"})
	f.Fuzz(func(t *testing.T, method, path, rawQuery string, copySource bool) {
		r := fuzzRequest(method, path, rawQuery, copySource, 0, false)
		fuzzCheckClassify(t, s3, plain, method, path, rawQuery, copySource, r)
	})
}

// FuzzEstimate: any request (method, path, raw query, x-amz-copy-source, Content-Length of any
// int64, a body or none, an aws-chunked marking with any x-amz-decoded-content-length) through the default model and through a model of a fuzzed config.
// Properties: no panic; an invalid config is rejected with a message naming the cost field;
// the operation is Classify's (checked as in FuzzClassify for the default models); Declared and
// Streaming follow Content-Length and the body; the cost is min(base + ceil(bytes/quantum) ×
// bandwidth, max) exactly, so in [0, max] and >= 1 when the base is >= 1; Settle is in [0, max]
// and is what the settlement rule says (docs/design.md, "Cost model").
func FuzzEstimate(f *testing.F) {
	type seed struct {
		method, path, query                          string
		copySource                                   bool
		contentLength                                int64
		body                                         bool
		bodyRead, respBytes                          int64
		http, responseBytes                          bool
		quantum, bandwidth, max, def, streamEstimate int64
		baseOp                                       uint8
		baseVal                                      int64
		decoded                                      int64
		chunked                                      uint8
	}
	const maxInt, minInt = int64(1<<63 - 1), int64(-1 << 63)
	for _, s := range []seed{
		{method: "GET", path: "/b/k"},
		{method: "PUT", path: "/b/k", contentLength: 1 << 20, bodyRead: 1 << 20},
		{method: "PUT", path: "/b/k", contentLength: -1, body: true, bodyRead: 3 << 20},
		{method: "PUT", path: "/b/k", contentLength: maxInt, body: true, bodyRead: 10},
		{method: "POST", path: "/b/k", query: "uploads", contentLength: minInt, body: true},
		{
			method: "PUT", path: "/b/k", query: "partNumber=1&uploadId=u", contentLength: 65537, bodyRead: 65536,
			respBytes: maxInt, responseBytes: true, quantum: 1, bandwidth: maxInt, max: maxInt,
		},
		{method: "GET", path: "/b", respBytes: 1 << 40, responseBytes: true, http: true, quantum: 3, bandwidth: 7, max: 100},
		{method: "BREW", path: "/", contentLength: -5, def: 0, baseOp: uint8(OpOther), baseVal: 0},
		{method: "DELETE", path: "/b/k", query: "uploadId", quantum: -1},
		{method: "POST", path: "/b", query: "delete", contentLength: 2900, bodyRead: 1037},
		{method: "POST", path: "/b", query: "delete=", contentLength: -1, body: true, bodyRead: 70000},
		{method: "POST", path: "/b", query: "delete", contentLength: 1 << 20, baseOp: uint8(OpDeleteObjects), baseVal: maxInt},
		{method: "PUT", path: "/b/k", copySource: true, contentLength: 10, bandwidth: -1, max: -1, def: -1},
		{method: "PUT", path: "/b/k", contentLength: 1, baseOp: uint8(OpPut), baseVal: maxInt, max: 5},
		{method: "PATCH", path: "/b/k", contentLength: -1, body: true, streamEstimate: maxInt, quantum: maxInt},
		{method: "GET", path: "/b/k", baseOp: 200, baseVal: -3},
		{method: "PUT", path: "/b/k", contentLength: 1<<20 + 1450, bodyRead: 1<<20 + 1450, decoded: 1 << 20, chunked: chunkedEncoding},
		{method: "PUT", path: "/b/k", contentLength: 1 << 30, bodyRead: 1 << 30, decoded: 0, chunked: chunkedStreamingSHA},
		{method: "PUT", path: "/b/k", contentLength: -1, body: true, bodyRead: 70000, decoded: 65536, chunked: chunkedEncoding},
		{method: "PUT", path: "/b/k", contentLength: 5000, bodyRead: 100, decoded: 4000, chunked: chunkedDecodedOnlyHdr},
		{method: "PUT", path: "/b/k", contentLength: 5000, decoded: -7, chunked: chunkedEncoding},
	} {
		f.Add(s.method, s.path, s.query, s.copySource, s.contentLength, s.body, s.bodyRead, s.respBytes,
			s.http, s.responseBytes, s.quantum, s.bandwidth, s.max, s.def, s.streamEstimate, s.baseOp, s.baseVal, s.decoded, s.chunked)
	}
	s3 := mustNew(f, Config{})
	plain := mustNew(f, Config{Operations: "http"})
	f.Fuzz(func(t *testing.T, method, path, rawQuery string, copySource bool, contentLength int64, body bool,
		bodyRead, respBytes int64, httpOps, responseBytes bool, quantum, bandwidth, maxCost, def, streamEstimate int64,
		baseOp uint8, baseVal int64, decoded int64, chunked uint8,
	) {
		decodedHeader := strconv.FormatInt(decoded, 10)
		if chunked >= 4 {
			decodedHeader = "" // marked aws-chunked without a payload length
		}
		r := fuzzChunkedRequest(method, path, rawQuery, copySource, contentLength, body, chunked, decodedHeader)
		fuzzCheckClassify(t, s3, plain, method, path, rawQuery, copySource, r)

		cfg := Config{Quantum: quantum, Max: maxCost, StreamEstimate: streamEstimate, ResponseBytes: responseBytes}
		if httpOps {
			cfg.Operations = "http"
		}
		// 0 stands for "unset" (the default); any other value, including a negative one, is set.
		if bandwidth != 0 {
			cfg.Bandwidth = Int(bandwidth)
		}
		if def != 0 {
			cfg.Default = Int(def)
		}
		if baseOp < 2*uint8(NumOperations) { // else no base override
			name := Operation(baseOp % uint8(NumOperations)).String()
			if baseOp >= uint8(NumOperations) {
				name = strings.ToLower(name)
			}
			cfg.Base = map[string]int64{name: baseVal}
		}
		models := []*Model{s3, plain}
		if m, err := New(cfg); err != nil {
			if !strings.HasPrefix(err.Error(), "cost.") {
				t.Fatalf("New(%s): error %q does not name the cost field", fuzzConfig(cfg), err)
			}
		} else {
			models = append(models, m)
		}

		for _, m := range models {
			c := m.Config()
			e := m.Estimate(r)
			if e.Op != m.Classify(r) {
				t.Fatalf("Estimate op %v, Classify %v", e.Op, m.Classify(r))
			}
			streaming := contentLength < 0 && r.Body != nil && r.Body != http.NoBody
			// An aws-chunked body with a payload length, under the S3 rules, is charged its
			// payload once its wire bytes reach it, unless the framing exceeds 1/64 of the wire
			// bytes plus 1 KiB.
			awsChunked := c.Operations != "http" && (chunked == chunkedEncoding || chunked == chunkedStreamingSHA) && decoded >= 0
			charged := func(wire int64) int64 {
				if awsChunked && wire > decoded && wire-decoded <= wire/64+1024 {
					return decoded
				}
				return wire
			}
			var bytes, declared int64
			switch {
			case contentLength >= 0:
				bytes, declared = charged(contentLength), contentLength
			case streaming && awsChunked:
				bytes, declared = decoded, -1
			case streaming && slices.Contains([]string{"GET", "HEAD", "DELETE", "OPTIONS", "TRACE"}, method):
				bytes, declared = 0, -1 // HTTP/3 sends these without a length
			case streaming:
				bytes, declared = c.StreamEstimate, -1
			}
			if e.Declared != declared || e.Streaming != streaming {
				t.Fatalf("Content-Length %d, body %v: Declared %d Streaming %v, want %d %v",
					contentLength, body, e.Declared, e.Streaming, declared, streaming)
			}
			base := fuzzBaseOf(c, e.Op)
			if m.Base(e.Op) != base {
				t.Fatalf("config %s: base(%v) = %d, want %d", fuzzConfig(c), e.Op, m.Base(e.Op), base)
			}
			// DELETE_OBJECTS: the base per object the body can name, up front as many as its
			// bytes can hold (shortest entry 29 bytes), at least 1, at most 1000.
			perRequest := func(objects, bytes int64) int64 {
				if e.Op != OpDeleteObjects {
					return fuzzCost(c, base, bytes)
				}
				objects = min(max(objects, 1), 1000)
				if new(big.Int).Mul(big.NewInt(base), big.NewInt(objects)).Cmp(big.NewInt(c.Max)) > 0 {
					return c.Max
				}
				return fuzzCost(c, base*objects, bytes)
			}
			if want := perRequest(bytes/29, bytes); e.Cost != want {
				t.Fatalf("config %s: cost of %v with %d bytes = %d, want %d", fuzzConfig(c), e.Op, bytes, e.Cost, want)
			}
			if e.Cost < 0 || e.Cost > c.Max || (base >= 1 && e.Cost < 1) {
				t.Fatalf("config %s: cost %d of %v out of range (base %d, max %d)", fuzzConfig(c), e.Cost, e.Op, base, c.Max)
			}

			objects := bodyRead % 1200 // objects a DeleteObjects body named (any count, for the others)
			got := m.Settle(e, Usage{BodyBytes: bodyRead, Objects: objects, ResponseBytes: respBytes})
			want := e.Cost
			switch {
			case e.Op == OpDeleteObjects && e.Streaming:
				want = perRequest(objects, charged(bodyRead))
			case e.Op == OpDeleteObjects:
				want = perRequest(objects, charged(min(bodyRead, e.Declared)))
			case e.Streaming || bodyRead < e.Declared:
				want = fuzzCost(c, base, charged(bodyRead))
			}
			if c.ResponseBytes {
				want = fuzzCost(c, max(want, 0), respBytes)
			}
			if got != want || got < 0 || got > c.Max {
				t.Fatalf("config %s: Settle(%+v, read %d, response %d) = %d, want %d (max %d)",
					fuzzConfig(c), e, bodyRead, respBytes, got, want, c.Max)
			}
		}
	})
}
