package memstore

import (
	"math"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// memBucket is one app's L2 record (the Store semantics' "L2 app bucket"). Times are µs since the
// Unix epoch, amounts float64 as in Redis (Lua numbers are doubles).
type memBucket struct {
	hasBucket bool    // false: only statistics so far (Redis: a hash written by HINCRBY alone)
	tokens    float64 // never negative, never above the burst of the last call
	ts        int64   // last refill
	debt      float64
	borrowed  float64
	consumed  int64   // total granted
	requests  int64   // total reported
	seqs      memSeqs // last applied report Seq per instance (for requests)

	// Warm-up (AppPolicy.Warmup). Redis: fields last_grant, warm_start, warm_granted.
	hasGrant    bool  // false: no grant yet (a new record, or one made by a Return or Report)
	lastGrant   int64 // last grant, or the start of the last warm-up
	warming     bool  // a warm-up was started and has not been seen to end
	warmStart   int64
	warmGranted int64 // granted since warmStart

	touched int64 // last write, for idle expiry
	ttl     int64 // idle lifetime set by the last write (Redis: PEXPIRE on every write)
}

const (
	memMaxIdleTTL = int64(store.MaxRecordIdle / time.Microsecond) // keeps the µs count far from overflow
	memSweepEvery = 60 * int64(time.Second/time.Microsecond)
	memMaxRetryUS = 1 << 53 // ≈ 285 years: any longer retry-after is capped (fits a time.Duration)
)

// refill adds the tokens earned since ts at guaranteed × factor and clamps to the burst; what
// does not fit pays debt. Borrowing is repaid from the refill the app leaves unused, never from
// its guarantee: repaid first from every refill, an app with steady demand borrowed again as
// fast as it repaid and kept 1/1.2 of its guaranteed rate (1/2 with one-token borrows, which
// owe 2), worse off than without max_borrow. The burst may have shrunk since the last call
// (reload), so the result is clamped even when nothing is added.
//
//	elapsed = max(0, now - ts) / 1e6
//	tokens = tokens + elapsed * guaranteed * factor
//	if tokens > burst: over = tokens - burst; tokens = burst
//	    if debt > 0: newdebt = debt - min(debt, over)
//	                 borrowed = newdebt == 0 ? 0 : borrowed * (newdebt / debt); debt = newdebt
//	ts = max(ts, now)
func (b *memBucket) refill(p store.AppPolicy, factor float64, now int64) {
	elapsed := float64(max(0, now-b.ts)) / 1e6
	tokens := b.tokens + elapsed*p.Guaranteed*factor
	if tokens > p.Burst {
		over := tokens - p.Burst
		tokens = p.Burst
		if b.debt > 0 {
			newDebt := b.debt - math.Min(b.debt, over)
			if newDebt == 0 {
				b.borrowed = 0
			} else {
				b.borrowed = b.borrowed * (newDebt / b.debt)
			}
			b.debt = newDebt
		}
	}
	b.tokens = tokens
	b.ts = max(b.ts, now)
}

// lease takes tokens from a refilled bucket:
//
//	need = min(Need, floor(burst)); want = max(Want, need); avail = floor(tokens)
//	avail >= want → want;  avail >= need → avail;  else 0
//
// The spec's "avail >= need and need > 0" branch together with its "Need = 0: grant
// min(want, avail)" rule is exactly "avail >= need" (avail is never negative), which is what
// this implements. During a warm-up the grant is capped by the ramp (see warm): room < need →
// 0, otherwise min(grant, room); remaining = min(floor(tokens), max(0, room - granted)).
// When granted < need: reason app_exhausted and
//
//	retry_after_us = avail < need ? bucket_us : 0,  then max(that, ramp_us) if the ramp refused,
//	bucket_us = rate > 0 ? min(2^53, ceil((need - tokens) / rate * 1e6)) : 1e6,  rate = guaranteed × factor
//
// computed in this order (divide by rate, then scale to µs, then ceil), then capped at 2^53.
// Debt is not included: the spec's formula is followed literally. A grant > 0 sets last_grant
// = now and, during a warm-up, adds to warm_granted.
//
// The lease carries the record's debt and borrowed after the refill (lease changes neither).
//
// short is what the app may borrow (LeaseRequest.Unallocated): need - avail when the grant is
// short because the bucket is (avail < need) and no warm-up ramp is in progress; else 0.
func (b *memBucket) lease(p store.AppPolicy, factor float64, want, need, now int64) (l store.Lease, short int64) {
	need = min(need, int64(math.Floor(p.Burst)))
	want = max(want, need)
	avail := int64(math.Floor(b.tokens))
	var granted int64
	switch {
	case avail >= want:
		granted = want
	case avail >= need:
		granted = avail
	}
	ramping, room, rampUS := b.warm(p, factor, need, now)
	rampRefused := false
	if ramping {
		if room < float64(need) {
			granted, rampRefused = 0, true
		} else if float64(granted) > room {
			granted = int64(room)
		}
	}
	b.tokens -= float64(granted)
	b.consumed += granted
	if granted > 0 {
		b.hasGrant, b.lastGrant = true, now
		if ramping {
			b.warmGranted += granted
		}
	}
	l = store.Lease{Granted: granted, Remaining: int64(math.Floor(b.tokens)), Debt: b.debt, Borrowed: b.borrowed}
	if ramping {
		l.Remaining = int64(math.Min(float64(l.Remaining), math.Max(0, room-float64(granted))))
	}
	if granted < need {
		l.Reason = store.ReasonAppExhausted
		var us float64
		if avail < need {
			us = 1e6
			if rate := p.Guaranteed * factor; rate > 0 {
				us = math.Min(memMaxRetryUS, math.Ceil((float64(need)-b.tokens)/rate*1e6))
			}
		}
		if rampRefused {
			us = math.Max(us, rampUS)
		}
		us = math.Min(memMaxRetryUS, us)
		l.RetryAfter = time.Duration(us) * time.Microsecond
		if avail < need && !ramping {
			short = need - avail
		}
	}
	return l, short
}

// credit is the app's part of a borrow (LeaseRequest.Unallocated), after L1's pool gave it
// b > 0 tokens; it does not refill (ts stays):
//
//	need = min(Need, floor(burst));  tokens = tokens + b
//	debt = debt + ceil(b * 1.2);  borrowed = borrowed + b
//	floor(tokens) >= need → granted = need (consumed, last_grant = now);  else 0, app_exhausted
//	remaining = floor(tokens - granted); the lease carries the new debt and borrowed
//
// The "else" is for the Redis store, where another lease may take tokens between the steps.
func (b *memBucket) credit(p store.AppPolicy, borrowed, need, now int64) store.Lease {
	need = min(need, int64(math.Floor(p.Burst)))
	add := float64(borrowed)
	b.tokens = b.tokens + add
	b.debt = b.debt + math.Ceil(add*store.BorrowRepay)
	b.borrowed = b.borrowed + add
	var l store.Lease
	if int64(math.Floor(b.tokens)) >= need {
		l.Granted = need
		b.tokens -= float64(need)
		b.consumed += need
		if need > 0 {
			b.hasGrant, b.lastGrant = true, now
		}
	} else {
		l.Reason = store.ReasonAppExhausted
	}
	l.Remaining = int64(math.Floor(b.tokens))
	l.Debt, l.Borrowed = b.debt, b.borrowed
	return l
}

// warm runs the warm-up rules of a lease (AppPolicy.Warmup) before the grant, with w = warmup
// in µs and need already clamped to the burst:
//
//	w == 0 → no warm-up; a stored one is dropped
//	no last_grant or now - last_grant >= w → cold: warm_start = last_grant = now, warm_granted = 0
//	no warm-up stored, or now - warm_start >= w → none (a stored one is dropped)
//	t = max(0, now - warm_start) / 1e6;  W = w / 1e6;  a = guaranteed * factor / 3
//	allowance = max(a * t + a * t * t / W, max(need, 1))
//	room = floor(allowance - warm_granted)
//
// When the ramp refuses (room < need), ramp_us is when the allowance covers warm_granted + need,
// the root of a·x + (a/W)·x² = target, x in seconds since warm_start:
//
//	a > 0: x = 2 * target / (a + sqrt(a * a + 4 * (a / W) * target));  end = min(w, ceil(x * 1e6))
//	a = 0: end = w
//	ramp_us = max(1, end - (now - warm_start))
//
// Every product that is added is rounded on its own (no fused multiply-add), as in Lua.
func (b *memBucket) warm(p store.AppPolicy, factor float64, need, now int64) (ramping bool, room, rampUS float64) {
	w := p.WarmupUS()
	if w == 0 {
		b.warming = false
		return false, 0, 0
	}
	if !b.hasGrant || now-b.lastGrant >= w {
		b.hasGrant, b.lastGrant = true, now
		b.warming, b.warmStart, b.warmGranted = true, now, 0
	}
	if !b.warming || now-b.warmStart >= w {
		b.warming = false
		return false, 0, 0
	}
	tUS := max(0, now-b.warmStart)
	t := float64(tUS) / 1e6
	ws := float64(w) / 1e6
	a := p.Guaranteed * factor / 3
	allow := float64(a*t) + float64(a*t)*t/ws
	allow = math.Max(allow, math.Max(float64(need), 1))
	room = math.Floor(allow - float64(b.warmGranted))
	if room >= float64(need) {
		return true, room, 0
	}
	target := float64(b.warmGranted + need)
	end := float64(w)
	if a > 0 {
		x := 2 * target / (a + math.Sqrt(float64(a*a)+float64(4*(a/ws)*target)))
		end = math.Min(end, math.Ceil(x*1e6))
	}
	return true, room, math.Max(1, end-float64(tUS))
}

// give adds returned tokens, never above burst. It does not refill: ts stays, so the next
// refill covers the whole time since the last one at the factor of its caller.
func (b *memBucket) give(p store.AppPolicy, tokens int64) {
	b.tokens = math.Min(p.Burst, b.tokens+float64(tokens))
}

// touch marks a write: the record lives another max(store.RecordIdle(statsInterval),
// 2 × burst / guaranteed, warmup) of idleness (µs, rounded up; capped at 30 days), so that a
// record is dropped neither before the app has been idle for its warm-up nor before the
// statistics still on their way to it arrive.
func (b *memBucket) touch(p store.AppPolicy, statsInterval time.Duration, now int64) {
	b.touched = now
	b.ttl = memIdleTTL(p, statsInterval)
}

func memIdleTTL(p store.AppPolicy, statsInterval time.Duration) int64 {
	us := math.Max(math.Ceil(2*p.Burst/p.Guaranteed*1e6), float64(p.WarmupUS()))
	if !(us < float64(memMaxIdleTTL)) { // also catches NaN / +Inf
		return memMaxIdleTTL
	}
	return max(memKeep(statsInterval), int64(us))
}

// memKeep is store.RecordIdle in µs: at least store.MinRecordIdle.
func memKeep(statsInterval time.Duration) int64 {
	return store.RecordIdle(statsInterval).Microseconds()
}

func (b *memBucket) expired(now int64) bool { return now-b.touched >= b.ttl }

// lookup returns the app's live record, dropping it if it has been idle too long; nil if none.
func (m *Store) lookup(k memAppKey, now int64) *memBucket {
	b := m.apps[k]
	if b != nil && b.expired(now) {
		delete(m.apps, k)
		return nil
	}
	return b
}

// bucket returns the app's record with its bucket initialised: absent = {tokens = burst,
// ts = now, debt = 0, borrowed = 0}.
func (m *Store) bucket(k memAppKey, p store.AppPolicy, now int64) *memBucket {
	b := m.lookup(k, now)
	if b == nil {
		b = &memBucket{}
		m.apps[k] = b
	}
	if !b.hasBucket {
		b.hasBucket, b.tokens, b.ts, b.debt, b.borrowed = true, p.Burst, now, 0, 0
	}
	return b
}

// statsRecord returns the app's record for a statistics write (Report step 4), creating a
// statistics-only record if there is none. Without a policy the idle lifetime is the one of the
// last write, and at least what the caller's statistics interval needs (memKeep).
func (m *Store) statsRecord(k memAppKey, statsInterval time.Duration, now int64) *memBucket {
	b := m.lookup(k, now)
	if b == nil {
		b = &memBucket{}
		m.apps[k] = b
	}
	b.ttl = max(b.ttl, memKeep(statsInterval))
	b.touched = now
	return b
}

// sweep drops idle app records about once a minute, so rotating app ids cannot grow the store
// without bound; between sweeps, lookup drops them lazily.
func (m *Store) sweep(now int64) {
	if now-m.lastSweep < memSweepEvery && now >= m.lastSweep {
		return
	}
	m.lastSweep = now
	for k, b := range m.apps {
		if b.expired(now) {
			delete(m.apps, k)
		}
	}
	for _, l := range m.clusters {
		l.pruneInFlight(now)
	}
}
