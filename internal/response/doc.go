// Package response is what a rate-limit decision looks like on the wire: the rate-limit
// headers of each `headers` mode, the JSON and S3 rejection bodies, the {http.rate_limit.*}
// placeholders, and the writer that wraps an admitted request's response (it counts the
// response bytes and releases the in-flight slot of a hijacked connection when that
// connection closes).
//
// A decision is a Result on the stack; publishing it allocates one Outcome, which must outlive
// the handler because the response headers are written, and access logs read the
// placeholders, after the handler chain has returned.
package response
