package cost

import (
	"io"
	"sync"
	"sync/atomic"
)

// CountingBody wraps a request body and counts the bytes read from it, for settling streaming
// and short bodies, and for an S3 DeleteObjects request the objects it names (CountObjects).
// The counts are atomic because a proxy transport may read the body on another goroutine.
// Reuse it through GetCountingBody/PutCountingBody (or Reset) to avoid allocating per request.
type CountingBody struct {
	rc      io.ReadCloser
	n       atomic.Int64
	counter bool // count objects (CountObjects)
	objects objectCounter
}

// NewCountingBody returns a CountingBody reading from rc.
func NewCountingBody(rc io.ReadCloser) *CountingBody {
	b := new(CountingBody)
	b.Reset(rc)
	return b
}

// Reset makes b read from rc with a count of zero, counting bytes only.
func (b *CountingBody) Reset(rc io.ReadCloser) {
	b.rc = rc
	b.n.Store(0)
	b.counter = false
	b.objects.reset()
}

// CountObjects makes b count the objects the body names as well, when e is an S3
// DeleteObjects request (which Settle charges per object). Call it before the first Read.
func (b *CountingBody) CountObjects(e Estimate) {
	b.counter = e.Op == OpDeleteObjects
}

// Read reads from the wrapped body and counts what it got.
func (b *CountingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n.Add(int64(n))
	if b.counter && n > 0 {
		b.objects.scan(p[:n])
	}
	return n, err
}

// Usage returns what was read so far, for Model.Settle (ResponseBytes left to the caller).
func (b *CountingBody) Usage() Usage {
	return Usage{BodyBytes: b.n.Load(), Objects: b.objects.Count()}
}

// Close closes the wrapped body.
func (b *CountingBody) Close() error { return b.rc.Close() }

// N returns the number of bytes read so far.
func (b *CountingBody) N() int64 { return b.n.Load() }

var bodyPool = sync.Pool{New: func() any { return new(CountingBody) }}

// GetCountingBody returns a pooled CountingBody reading from rc.
func GetCountingBody(rc io.ReadCloser) *CountingBody {
	b := bodyPool.Get().(*CountingBody)
	b.Reset(rc)
	return b
}

// PutCountingBody returns b to the pool. Call it only once nothing can read b any more
// (net/http's Transport may close a request body after RoundTrip returns, so after the
// handler chain has finished and the body was closed); b must not be used afterwards.
func PutCountingBody(b *CountingBody) {
	b.Reset(nil)
	bodyPool.Put(b)
}
