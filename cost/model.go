package cost

import (
	"net/http"
	"strconv"
	"strings"
)

// Model computes request costs for one configuration. It is immutable and safe for
// concurrent use; Classify, Cost, Estimate and Settle do not allocate (but for Estimate's
// error on a malformed x-amz-decoded-content-length).
type Model struct {
	cfg       Config
	bandwidth int64 // *cfg.Bandwidth
	s3        bool
	base      [NumOperations]int64
}

// New returns the model for c, after applying defaults and validating.
// Base overrides win over the table; a base for OTHER wins over Default.
func New(c Config) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	m := &Model{cfg: c, bandwidth: *c.Bandwidth, s3: strings.EqualFold(c.Operations, "s3"), base: defaultBase}
	m.base[OpOther] = *c.Default
	for name, v := range c.Base {
		op, _ := ParseOperation(name) // validated above
		m.base[op] = v
	}
	return m, nil
}

// Config returns the configuration in effect, defaults applied.
func (m *Model) Config() Config { return m.cfg }

// ResponseBytes reports whether response body bytes are charged at settlement.
func (m *Model) ResponseBytes() bool { return m.cfg.ResponseBytes }

// Base returns the base cost of op.
func (m *Model) Base(op Operation) int64 {
	if int(op) >= NumOperations {
		op = OpOther
	}
	return m.base[op]
}

// Cost returns min(base(op) + ceil(bytes/quantum) × bandwidth, max). Negative bytes count as 0.
// It cannot overflow, whatever bytes is. (DELETE_OBJECTS is charged per object: Estimate and
// Settle.)
func (m *Model) Cost(op Operation, bytes int64) int64 {
	return m.addBytes(m.Base(op), bytes)
}

// opCost is Cost with DELETE_OBJECTS' base charged once per object (objects clamped to
// [1, MaxDeleteObjects]); objects is ignored for every other operation.
func (m *Model) opCost(op Operation, objects, bytes int64) int64 {
	if op != OpDeleteObjects {
		return m.Cost(op, bytes)
	}
	objects = min(max(objects, 1), MaxDeleteObjects)
	base := m.Base(op)
	if base > m.cfg.Max/objects {
		return m.cfg.Max
	}
	return m.addBytes(base*objects, bytes)
}

// addBytes returns min(c + ceil(bytes/quantum) × bandwidth, max) for 0 <= c, without overflow.
func (m *Model) addBytes(c, bytes int64) int64 {
	limit := m.cfg.Max
	if c >= limit {
		return limit
	}
	if bytes <= 0 || m.bandwidth == 0 {
		return c
	}
	units := bytes / m.cfg.Quantum
	if bytes%m.cfg.Quantum != 0 {
		units++
	}
	// units × bandwidth might overflow: compare against the room left below max by division.
	if units > (limit-c)/m.bandwidth {
		return limit
	}
	return c + units*m.bandwidth
}

// Classify returns the operation of r: the method alone with `operations http`; with
// `operations s3` the S3 rules (docs/s3.md) for path-style requests (/bucket/key).
func (m *Model) Classify(r *http.Request) Operation {
	op := methodOp(r.Method)
	if !m.s3 {
		return op
	}
	switch op {
	case OpGet:
		if !hasObjectKey(r.URL.Path) {
			return OpList
		}
		if q := scanQuery(r.URL.RawQuery); q&(qListType|qPrefix|qDelimiter) != 0 {
			return OpList
		}
	case OpPut:
		if len(r.Header["X-Amz-Copy-Source"]) > 0 {
			return OpCopy
		}
		if q := scanQuery(r.URL.RawQuery); q&qPartNumber != 0 && q&qUploadID != 0 {
			return OpMultipartUpload
		}
	case OpPost:
		q := scanQuery(r.URL.RawQuery)
		if q&qUploads != 0 {
			return OpMultipartInit
		}
		if q&qUploadID != 0 {
			return OpMultipartComplete
		}
		if q&qDelete != 0 {
			return OpDeleteObjects
		}
	case OpDelete:
		if scanQuery(r.URL.RawQuery)&qUploadID != 0 {
			return OpMultipartAbort
		}
	default:
		// The S3 rules refine GET, PUT, POST and DELETE only; other methods keep methodOp's
		// operation.
	}
	return op
}

// hasObjectKey reports whether a path-style S3 path names an object: "/", "/bucket" and
// "/bucket/" do not; "/bucket/key" does.
func hasObjectKey(path string) bool {
	if len(path) > 0 && path[0] == '/' {
		path = path[1:]
	}
	i := strings.IndexByte(path, '/')
	return i >= 0 && i < len(path)-1
}

// Query keys that matter to the S3 rules, as bits.
const (
	qListType = 1 << iota
	qPrefix
	qDelimiter
	qUploads
	qUploadID
	qPartNumber
	qDelete
)

// scanQuery returns the S3 query keys present in a raw query, without allocating (url.Values
// would). Keys are compared as sent, case-sensitively, as S3 does.
func scanQuery(raw string) uint8 {
	var bits uint8
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		key, _, _ := strings.Cut(kv, "=")
		switch key {
		case "list-type":
			bits |= qListType
		case "prefix":
			bits |= qPrefix
		case "delimiter":
			bits |= qDelimiter
		case "uploads":
			bits |= qUploads
		case "uploadId":
			bits |= qUploadID
		case "partNumber":
			bits |= qPartNumber
		case "delete":
			bits |= qDelete
		}
	}
	return bits
}

// Estimate is the cost taken before a request runs.
type Estimate struct {
	Op        Operation
	Cost      int64
	Declared  int64 // Content-Length; -1 for a streaming body; 0 without a body
	Streaming bool  // no Content-Length: Cost assumes stream_estimate bytes (or Decoded)
	Chunked   bool  // an S3 aws-chunked body declaring its payload length, Decoded
	Decoded   int64
}

// Estimate returns the up-front cost of r: its operation plus its declared body length, or
// stream_estimate bytes for a body of unknown length (chunked) unless the method carries no
// body (bodiless), or nothing for no body. With `operations s3`, an aws-chunked upload is
// charged its payload (x-amz-decoded-content-length) rather than its wire bytes (bodyBytes),
// and a DeleteObjects request as many objects as those bytes can name (objectsIn).
func (m *Model) Estimate(r *http.Request) Estimate {
	e := Estimate{Op: m.Classify(r)}
	if m.s3 && r.ContentLength != 0 { // no body, nothing to decode (and three header misses saved)
		e.Decoded, e.Chunked = decodedLength(r)
	}
	var bytes int64
	switch {
	case r.ContentLength >= 0:
		e.Declared = r.ContentLength
		bytes = e.bodyBytes(e.Declared)
	case r.Body != nil && r.Body != http.NoBody:
		e.Declared, e.Streaming = -1, true
		switch {
		case e.Chunked:
			bytes = e.Decoded
		case bodiless(r.Method):
		default:
			bytes = m.cfg.StreamEstimate
		}
	}
	e.Cost = m.opCost(e.Op, objectsIn(bytes), bytes)
	return e
}

// objectsIn is the most objects a DeleteObjects body of n bytes can name (at least one: the
// request itself is charged as one delete).
func objectsIn(n int64) int64 {
	return min(max(n/int64(minObjectXML), 1), MaxDeleteObjects)
}

// bodiless reports whether requests of method carry no body by convention (RFC 9110 gives one
// no meaning). Over HTTP/3 such a request has no Content-Length and a body that ends at once,
// so it looks like a streaming body: estimating stream_estimate for it would make every GET of a
// browser on HTTP/3 take 16 tokens up front, and reject it when fewer are left. Whatever
// body one does send is still charged as it is read.
func bodiless(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// decodedLength returns the payload length an S3 streaming upload declares: the body is
// aws-chunked (Content-Encoding, or a STREAMING-* x-amz-content-sha256, as SigV4 streaming
// and the SDKs' checksum trailers send it) and x-amz-decoded-content-length is a length.
func decodedLength(r *http.Request) (int64, bool) {
	v := r.Header["X-Amz-Decoded-Content-Length"]
	if len(v) != 1 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	for _, ce := range r.Header["Content-Encoding"] {
		if strings.Contains(ce, "aws-chunked") {
			return n, true
		}
	}
	if sha := r.Header["X-Amz-Content-Sha256"]; len(sha) == 1 && strings.HasPrefix(sha[0], "STREAMING-") {
		return n, true
	}
	return 0, false
}

// bodyBytes returns the bytes charged for wire bytes of the request's body. An aws-chunked
// body carries its payload in chunks whose framing (sizes, signatures, trailer) is not part of
// the object: it is charged the payload once the wire bytes reach it, and what arrived before
// that. The payload length is the client's word, so the framing it excuses is bounded: beyond
// 1/64 of the wire bytes plus 1 KiB (SigV4's smallest chunks frame 1.1 %, the SDKs' 0.1 %),
// every wire byte is charged, and a false x-amz-decoded-content-length buys at most that.
func (e Estimate) bodyBytes(wire int64) int64 {
	if !e.Chunked || wire <= e.Decoded || wire-e.Decoded > wire/64+1024 {
		return wire
	}
	return e.Decoded
}

// Usage is what a request used, as far as Settle is concerned.
type Usage struct {
	BodyBytes     int64 // request body bytes read (CountingBody)
	Objects       int64 // objects a DeleteObjects body named, as far as it was read (CountingBody)
	ResponseBytes int64 // response body bytes written
}

// Settle returns the actual cost of a finished request: the cost of the bytes read for a
// streaming body or a body read short of its Content-Length (the unread part is refunded), for
// a DeleteObjects request its base per object the body named, the estimate otherwise; plus the
// response bytes in bandwidth units when response_bytes is on; never above max. The caller
// settles the difference with e.Cost.
func (m *Model) Settle(e Estimate, u Usage) int64 {
	c := e.Cost
	switch {
	case e.Op == OpDeleteObjects:
		c = m.opCost(e.Op, u.Objects, e.bodyBytes(e.readBytes(u.BodyBytes)))
	case e.Streaming || u.BodyBytes < e.Declared:
		c = m.Cost(e.Op, e.bodyBytes(u.BodyBytes))
	}
	if m.cfg.ResponseBytes {
		c = m.addBytes(max(c, 0), u.ResponseBytes)
	}
	return min(c, m.cfg.Max)
}

// readBytes returns the body bytes charged of the read bytes read so far: all of them for a
// streaming body, at most the Content-Length otherwise.
func (e Estimate) readBytes(read int64) int64 {
	if e.Streaming {
		return read
	}
	return min(read, e.Declared)
}
