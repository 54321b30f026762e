package cluster

import (
	"time"

	"github.com/tierbucket/caddy-tierbucket/history"
)

// Reading is the figures of a state that its history records each second.
type Reading func(*State) history.Reading

// sampler feeds a state's history once a second, just after each whole second. It runs from
// the state's creation to Destruct.
type sampler struct {
	rec  *history.Recorder
	stop chan struct{}
	done chan struct{}
}

// startSampler records the state's figures now (so the history has a sample at once) and
// starts the goroutine that records them every second.
func startSampler(s *State, read Reading) *sampler {
	sm := &sampler{rec: history.New(), stop: make(chan struct{}), done: make(chan struct{})}
	record := func(now time.Time) { sm.rec.Record(now, read(s)) }
	record(time.Now())
	go func() {
		defer close(sm.done)
		t := time.NewTimer(untilNextSecond(time.Now()))
		defer t.Stop()
		for {
			select {
			case <-sm.stop:
				return
			case now := <-t.C:
				record(now)
				t.Reset(untilNextSecond(time.Now()))
			}
		}
	}()
	return sm
}

// untilNextSecond is the wait until 20 ms after the next whole second, so that every tick
// falls in its own second.
func untilNextSecond(now time.Time) time.Duration {
	return now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond).Sub(now)
}

// close stops the goroutine and waits for it.
func (sm *sampler) close() {
	close(sm.stop)
	<-sm.done
}
