// Package clock is the one notion of time that the limiter, the connection counter and both
// stores share, so that a test can drive all of them with one manual clock.
package clock

import (
	"context"
	"sync/atomic"
	"time"
)

// Clock tells the time, and waits.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done (a nil ctx never is), and reports whether the
	// full time passed.
	Sleep(ctx context.Context, d time.Duration) bool
}

// System is the real clock (time.Now).
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// Sleep waits on a timer.
func (System) Sleep(ctx context.Context, d time.Duration) bool {
	if ctx == nil {
		ctx = context.Background()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Or returns c, or System when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return System{}
	}
	return c
}

// Start is where every Manual clock begins: a whole second, so window arithmetic is exact.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Manual is a clock that moves only when told, for tests. It is safe for concurrent use, and Now
// takes no lock (benchmarks read it from every CPU).
type Manual struct{ ns atomic.Int64 }

// NewManual returns a Manual clock at Start.
func NewManual() *Manual {
	m := new(Manual)
	m.ns.Store(Start.UnixNano())
	return m
}

// Now returns the clock's time, in UTC.
func (m *Manual) Now() time.Time { return time.Unix(0, m.ns.Load()).UTC() }

// Advance moves the clock forward by d (backward for a negative d).
func (m *Manual) Advance(d time.Duration) { m.ns.Add(int64(d)) }

// Sleep advances the clock by d at once, unless ctx is done already.
func (m *Manual) Sleep(ctx context.Context, d time.Duration) bool {
	if ctx != nil && ctx.Err() != nil {
		return false
	}
	m.Advance(d)
	return true
}

// Set moves the clock to t.
func (m *Manual) Set(t time.Time) { m.ns.Store(t.UnixNano()) }
