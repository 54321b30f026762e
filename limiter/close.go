package limiter

import (
	"fmt"
	"strings"
)

// Close stops the sync loop, sends the pending statistics in a last report that takes the
// instance out of the fleet's live set (store.Report.Leaving), and returns every unspent token
// to L2. After Close, takes are served from local tokens only (there are none left), so they
// are rejected with ReasonRedisUnavailable. The Store is not closed.
func (l *Limiter) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(l.stop)
	if l.looping {
		<-l.done // a tick in progress finishes first (its Store calls are bounded)
	}
	l.syncer.mu.Lock()
	defer l.syncer.mu.Unlock()
	if l.syncer.unwatch != nil {
		l.syncer.unwatch()
	}
	now := l.clock.Now()
	// The pending cost batch is sent first (with its Seq), then what was admitted since, with
	// every app's statistics; the last report leaves the live set, so that the other
	// instances size their shares and rescue limits for the fleet without this one at their
	// next report rather than InstanceTTL later. A Limiter that never reported and has nothing
	// to send makes no Store call (`caddy validate` provisions and closes one).
	var err error
	if l.Level() == LevelFailOpen {
		// Known to be away: not asked at all. A call would wait for a new connection's
		// handshake, which go-redis bounds by its socket timeout (1 s), not by the call's, and
		// a reload away from a frozen Redis would wait that long per state it closes (a state a
		// reload replaces after its reports failed). Its heartbeat expires instead.
		err = errFailOpen
	} else if l.syncer.reported || (l.syncer.pending != nil && l.syncer.pending.cost > 0) || l.unsent() {
		leave := l.syncer.pending == nil // one report carries everything: it is the last
		err = l.report(now, l.apps(), true, leave)
		if err == nil && (!leave || l.unsent()) {
			err = l.report(now, l.apps(), true, true)
		}
	}
	statsLost := err != nil
	// After one failed call the Store is not asked again: a shutdown during an outage would
	// otherwise wait a timeout per app holding tokens (a frozen Redis: a second each).
	var lost, losers int64
	for _, a := range l.apps() {
		n := a.takeTokens(0)
		if n == 0 {
			continue
		}
		if err == nil {
			if err = a.giveBack(now, n); err == nil {
				continue
			}
		} else {
			a.dropped.Add(n)
		}
		lost, losers = lost+n, losers+1
	}
	l.deg.closing()
	if err == nil {
		return nil
	}
	var what []string
	if losers > 0 {
		what = append(what, fmt.Sprintf("%d unspent tokens of %d apps were not returned (their buckets refill them)", lost, losers))
	}
	if statsLost {
		what = append(what, "the statistics not yet sent are lost")
	}
	return fmt.Errorf("the Store failed while closing and was not asked again: %s: %w", strings.Join(what, "; "), err)
}

// unsent reports whether some app has statistics or cost not yet acknowledged (syncer.mu held).
func (l *Limiter) unsent() bool {
	for _, a := range l.apps() {
		if !a.statsSettled() || a.settledCost.Load() > a.costSent {
			return true
		}
	}
	return false
}
