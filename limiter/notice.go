package limiter

import (
	"sync"
	"time"
)

// noticeEvery is how often at most one kind of data-loss WARN is logged.
const noticeEvery = time.Minute

// lossCauses names what makes a Store lose what it had acknowledged, for the data-loss WARNs.
// The last one repeats for as long as memory is short: an evicted bucket comes back full.
const lossCauses = "a failover to a replica that had not received it, a restart without its data, " +
	"or keys evicted under maxmemory: the Store's Redis must not evict (maxmemory-policy noeviction)"

// notice throttles a WARN that can repeat: the first occurrence is logged at once, the next
// ones at most once per noticeEvery, with how many there were since the last line (counts, not
// a flood: a Redis that evicts our keys makes the Store lose data several times a second).
type notice struct {
	mu   sync.Mutex
	next time.Time
	seen int64 // occurrences since the last line, this one included
	sum  int64 // what they carried (requests, overrides), since the last line
}

// due records one occurrence carrying n and reports whether to log now, with the occurrences
// and their sum since the last line.
func (o *notice) due(now time.Time, n int64) (occurrences, sum int64, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen++
	o.sum += n
	if now.Before(o.next) {
		return 0, 0, false
	}
	occurrences, sum = o.seen, o.sum
	o.seen, o.sum, o.next = 0, 0, now.Add(noticeEvery)
	return occurrences, sum, true
}
