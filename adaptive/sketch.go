package adaptive

import (
	"math/bits"
	"time"
)

// SketchBuckets is the number of buckets of a latency sketch.
const SketchBuckets = 16

// sketchBase is the upper bound of bucket 0; bucket i holds latencies below sketchBase × 2^i,
// the last one everything above (≈ 2 s and up).
const sketchBase = 128 * time.Microsecond

// Sketch counts latencies in log-scale buckets (factor 2): small enough to travel in every
// cluster report and to be added up fleet-wide, fine enough to show an operator the p90.
type Sketch [SketchBuckets]int64

// Bucket is the sketch bucket of latency d: one shift and a bit count, no allocation.
func Bucket(d time.Duration) int {
	if d < sketchBase {
		return 0
	}
	return min(bits.Len64(uint64(d/sketchBase)), SketchBuckets-1)
}

// UpperBound is the upper bound of bucket i's latencies (the last bucket: its lower bound).
func UpperBound(i int) time.Duration {
	if i >= SketchBuckets-1 {
		return sketchBase << (SketchBuckets - 2)
	}
	return sketchBase << i
}

// Add adds o's counts to s.
func (s *Sketch) Add(o *Sketch) {
	for i := range s {
		s[i] += o[i]
	}
}

// Count is the number of latencies s holds.
func (s *Sketch) Count() int64 {
	var n int64
	for _, c := range s {
		n += c
	}
	return n
}

// P90 is the upper bound of the bucket that holds the 90th percentile (0 for an empty sketch):
// the true p90 is at most this, and more than half of it.
func (s *Sketch) P90() time.Duration { return s.quantile(90) }

// quantile is the upper bound of the bucket that holds the pct-th percentile of the latencies
// (0 for an empty sketch).
func (s *Sketch) quantile(pct int64) time.Duration {
	n := s.Count()
	if n == 0 {
		return 0
	}
	var seen int64
	for i, c := range s {
		seen += c
		if seen*100 >= n*pct {
			return UpperBound(i)
		}
	}
	return UpperBound(SketchBuckets - 1)
}
