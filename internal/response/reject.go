package response

import (
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Reject answers a rejected request whose outcome is o (published or not): the status of its
// reason, and the JSON body, or the S3 error document with format s3. With asError it writes
// no body and returns a Caddy error of that status for handle_errors (an S3 rejection keeps its
// retry headers, which S3 clients read).
func (s Style) Reject(w http.ResponseWriter, r *http.Request, o *Outcome, asError bool) error {
	status := s.Status(o.Reason)
	if waitsForContinue(r) {
		// The client sends its body only after "100 Continue", which a rejection never asks
		// for. Go's server, finding the body unread once the answer is written, reads it to
		// reuse the connection, bypassing the reader that would send the "100 Continue" (Caddy
		// has replaced the request's body): both sides would wait until the client's read
		// timeout. Closing the connection after the answer skips that read; the client retries
		// on a new one.
		w.Header().Set("Connection", "close")
	}
	if asError {
		if s.S3 {
			setS3Headers(w.Header(), o)
		}
		return &RejectionError{Status: status, Reason: o.Reason}
	}
	if s.S3 {
		return writeS3Rejection(w, r, status, o)
	}
	return writeJSONRejection(w, r, status, o)
}

// waitsForContinue reports whether r is an HTTP/1.1 request with a body that its client sends
// only after a "100 Continue" (Expect: 100-continue).
func waitsForContinue(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ContentLength == 0 {
		return false
	}
	for _, v := range r.Header["Expect"] {
		if strings.EqualFold(strings.TrimSpace(v), "100-continue") {
			return true
		}
	}
	return false
}

// RejectionError is Reject's answer in `errors` mode: the caller hands it to its error
// handling (Caddy's handle_errors) with Status.
type RejectionError struct {
	Status int
	Reason store.Reason
}

func (e *RejectionError) Error() string { return "rate limit exceeded: " + e.Reason.String() }

// writeJSONRejection writes the JSON body of a rejection:
// {"error":"rate_limit_exceeded","reason":"app_exhausted","retry_after":1,"remaining":0,"cost":17}
func writeJSONRejection(w http.ResponseWriter, r *http.Request, status int, o *Outcome) error {
	var retry int64
	if o.retryable() {
		retry = retrySeconds(o.RetryAfter)
	}
	var f fields
	f.constant("Content-Type", "application/json")
	f.constant("X-Content-Type-Options", "nosniff")
	f.set(w.Header(), o, nil)
	// No Content-Length: net/http sets it for a body written in one piece by a handler.
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil // a HEAD response has no body
	}
	bp := bodyPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `{"error":"rate_limit_exceeded","reason":"`...)
	b = append(b, o.Reason.String()...) // reason names are plain ASCII, no escaping needed
	b = append(b, `","retry_after":`...)
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, max(o.Remaining, 0), 10)
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, o.Cost, 10)
	b = append(b, "}\n"...)
	_, err := w.Write(b) // Write copies b (ResponseWriter contract), so it can go back to the pool
	*bp = b
	bodyPool.Put(bp)
	return err
}

// bodyPool holds the buffers rejection bodies are built in.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 160); return &b }}
