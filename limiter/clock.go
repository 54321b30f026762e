package limiter

import "time"

// Clock tells the limiter the time. Production uses SystemClock; tests inject a manual clock so
// that refill, retry-after, lease expiry and degradation are deterministic.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock (time.Now).
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
