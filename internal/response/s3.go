package response

import (
	"crypto/rand"
	"encoding/binary"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// s3Error is the S3 error a rejection reason maps to: its HTTP status, code and message.
func s3Error(r store.Reason) (status int, code, message string) {
	switch r {
	case store.ReasonUnknownApp, store.ReasonAppDisabled:
		return http.StatusForbidden, "AccessDenied", "Access Denied"
	case store.ReasonInvalidAppID:
		return http.StatusBadRequest, "InvalidArgument", "Invalid app id."
	case store.ReasonRedisUnavailable:
		return http.StatusServiceUnavailable, "ServiceUnavailable", "Please reduce your request rate."
	default:
		return http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate."
	}
}

// requestIDs numbers S3 error responses: a random per-process base plus a counter, printed as
// 16 upper-case hex digits like S3's own request ids.
var requestIDs = func() *atomic.Uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	n := new(atomic.Uint64)
	n.Store(binary.BigEndian.Uint64(b[:]))
	return n
}()

// writeS3Rejection writes a rejection as S3 does:
// <Error><Code>SlowDown</Code><Message>…</Message><Resource>/bucket/key</Resource><RequestId>…</RequestId></Error>
// with Retry-After (s) and x-amz-retry-after (ms) on throttles, whatever the headers mode, since
// SDKs read them. A HEAD response has no body.
func writeS3Rejection(w http.ResponseWriter, r *http.Request, status int, o *Outcome) error {
	_, code, message := s3Error(o.Reason)
	hdr := w.Header()
	var f fields
	f.constant("Content-Type", "application/xml")
	f.constant("X-Content-Type-Options", "nosniff")
	f.set(hdr, o, nil)
	id := setS3Headers(hdr, o)
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil
	}
	bp := bodyPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n<Error><Code>"...)
	b = append(b, code...)
	b = append(b, "</Code><Message>"...)
	b = append(b, message...)
	b = append(b, "</Message><Resource>"...)
	b = appendXMLText(b, r.URL.Path)
	b = append(b, "</Resource><RequestId>"...)
	b = appendHex16(b, id)
	b = append(b, "</RequestId></Error>\n"...)
	_, err := w.Write(b)
	*bp = b
	bodyPool.Put(bp)
	return err
}

// setS3Headers sets what an S3 rejection carries besides its document: the request id, which it
// returns, and for a throttle Retry-After (seconds, unless the headers mode set it already) and
// x-amz-retry-after (milliseconds). With `errors`, handle_errors writes the body and these
// headers are all the handler adds.
func setS3Headers(hdr http.Header, o *Outcome) uint64 {
	id := requestIDs.Add(1)
	var room [64]byte
	var f fields
	b := room[:0]
	b = appendHex16(b, id)
	f.built("X-Amz-Request-Id", len(b))
	if o.retryable() {
		if _, ok := hdr[hdrRetryAfter]; !ok {
			b = strconv.AppendInt(b, retrySeconds(o.RetryAfter), 10)
			f.built(hdrRetryAfter, len(b))
		}
		b = strconv.AppendInt(b, max(o.RetryAfter.Milliseconds(), 1), 10)
		f.built("X-Amz-Retry-After", len(b))
	}
	f.set(hdr, o, b)
	return id
}

// appendHex16 appends n as 16 upper-case hex digits.
func appendHex16(b []byte, n uint64) []byte {
	const digits = "0123456789ABCDEF"
	for i := 60; i >= 0; i -= 4 {
		b = append(b, digits[(n>>uint(i))&0xf])
	}
	return b
}

// appendXMLText appends s escaped for XML character data (the request path is client input).
func appendXMLText(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '<':
			b = append(b, "&lt;"...)
		case '>':
			b = append(b, "&gt;"...)
		case '&':
			b = append(b, "&amp;"...)
		case '"':
			b = append(b, "&quot;"...)
		case '\'':
			b = append(b, "&apos;"...)
		default:
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				b = append(b, "\uFFFD"...) // not allowed in XML 1.0
				continue
			}
			b = append(b, c)
		}
	}
	return b
}
