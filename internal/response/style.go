package response

import (
	"net/http"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// HeaderMode says which rate-limit headers a handler writes (the `headers` option).
type HeaderMode uint8

const (
	// HeadersRejections, the default: the draft fields RateLimit and RateLimit-Policy, and
	// Retry-After, on rejections only.
	HeadersRejections HeaderMode = iota
	// HeadersDraft: RateLimit on every response as well.
	HeadersDraft
	// HeadersLegacy: X-RateLimit-Cost, -Remaining, -Reset (and the X-Connection-* fields on
	// in-flight rejections) on every response, Retry-After on rejections.
	HeadersLegacy
	// HeadersBoth: the legacy and the draft fields on every response.
	HeadersBoth
	// HeadersOff: no rate-limit header (an S3 rejection still carries its retry fields).
	HeadersOff
)

// ParseHeaderMode parses the `headers` option ("" is the default).
func ParseHeaderMode(s string) (HeaderMode, bool) {
	switch s {
	case "", "rejections":
		return HeadersRejections, true
	case "both":
		return HeadersBoth, true
	case "legacy":
		return HeadersLegacy, true
	case "draft":
		return HeadersDraft, true
	case "off":
		return HeadersOff, true
	}
	return 0, false
}

// Rejection body formats (the `format` option): json, the default, or s3, which answers the
// way S3 itself throttles so that S3 SDKs back off and retry on their own (docs/s3.md).
const (
	FormatJSON = "json"
	FormatS3   = "s3"
)

// Style is how one handler answers: its `headers` mode and its rejection format.
type Style struct {
	Headers HeaderMode
	S3      bool // format s3
}

// onAdmitted reports whether admitted responses carry rate-limit headers: not by default,
// where they go on rejections only (docs/performance.md, "The header defaults").
func (s Style) onAdmitted() bool {
	return s.Headers != HeadersRejections && s.Headers != HeadersOff
}

// Status is the HTTP status of a rejection for reason in this style (docs/s3.md for s3).
func (s Style) Status(reason store.Reason) int {
	if s.S3 {
		status, _, _ := s3Error(reason)
		return status
	}
	switch reason {
	case store.ReasonInvalidAppID:
		return http.StatusBadRequest
	case store.ReasonUnknownApp, store.ReasonAppDisabled:
		return http.StatusForbidden
	case store.ReasonRedisUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusTooManyRequests
	}
}
