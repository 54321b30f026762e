//go:build adaptiveharness

package e2e

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"
)

// storageBackend models an overloaded storage server: it serves capacity cost/s (every
// request here costs 1) through one FIFO queue, so that the time to response headers grows
// with the queue, and answers 503 SlowDown at once, as S3 does, to a request that would wait
// longer than its queue bound. The capacity can be changed while it runs.
type storageBackend struct {
	srv   *httptest.Server
	bound time.Duration

	mu       sync.Mutex
	capacity float64   // requests (cost) per second
	free     time.Time // when the queue is empty
	secs     map[int64]*backendSecond
	start    time.Time
}

// backendSecond is what the backend answered in one second of the run.
type backendSecond struct {
	served, throttled map[string]int
	latencies         []time.Duration // of the requests served
}

func newStorageBackend(capacity float64, bound time.Duration) *storageBackend {
	b := &storageBackend{bound: bound, capacity: capacity, secs: map[int64]*backendSecond{}, start: time.Now()}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	return b
}

func (b *storageBackend) setCapacity(c float64) {
	b.mu.Lock()
	b.capacity = c
	b.mu.Unlock()
}

func (b *storageBackend) serve(w http.ResponseWriter, r *http.Request) {
	app := r.Header.Get("X-App-Id")
	now := time.Now()
	b.mu.Lock()
	begin := now
	if b.free.After(now) {
		begin = b.free
	}
	done := begin.Add(time.Duration(float64(time.Second) / b.capacity))
	wait := done.Sub(now)
	throttled := wait > b.bound
	if !throttled {
		b.free = done
	}
	sec := b.second(now)
	if throttled {
		sec.throttled[app]++
	}
	b.mu.Unlock()
	if throttled {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"))
		return
	}
	time.Sleep(wait)
	b.mu.Lock()
	sec = b.second(now) // counted in the second it arrived
	sec.served[app]++
	sec.latencies = append(sec.latencies, wait)
	b.mu.Unlock()
	w.Write([]byte("ok"))
}

// second is the record of the run's second that holds t (b.mu held).
func (b *storageBackend) second(t time.Time) *backendSecond {
	i := int64(t.Sub(b.start) / time.Second)
	s := b.secs[i]
	if s == nil {
		s = &backendSecond{served: map[string]int{}, throttled: map[string]int{}}
		b.secs[i] = s
	}
	return s
}

// window sums the seconds [from, to) of the run: served per app, throttled, and the p90 of
// the time to response headers of the requests served.
func (b *storageBackend) window(from, to int64) (served map[string]int, total, throttled int, p90 time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	served = map[string]int{}
	var lat []time.Duration
	for i := from; i < to; i++ {
		s := b.secs[i]
		if s == nil {
			continue
		}
		for app, n := range s.served {
			served[app] += n
			total += n
		}
		for _, n := range s.throttled {
			throttled += n
		}
		lat = append(lat, s.latencies...)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		p90 = lat[int(math.Ceil(0.9*float64(len(lat))))-1]
	}
	return served, total, throttled, p90
}
