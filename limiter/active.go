package limiter

import "sync"

// The sync loop visits only the apps that may have work for it. An app is quiet when the loop
// has nothing left to do for it: its rate has decayed to zero, it holds no local tokens, no
// lease is in flight, and its cost and statistics were all acknowledged. A quiet app leaves the
// list at the end of a tick and is put back by its next admission, settlement or lease. An
// instance with tens of thousands of configured apps, most of them idle at any time, then
// spends its ticks on the busy ones (docs/design.md, "The sync path").
//
// Every change that can give the loop work (consumed, balance, statistics, a lease) is made
// before the App checks whether it is listed, and the loop unlists an app before it checks
// again whether the app is still quiet. So a change either sees the app unlisted and lists it,
// or happens before that second check and keeps the app listed: none is missed.

// idleRate is the consumption rate (cost per second) below which an app that consumed nothing
// since the last tick counts as not consuming at all. It is far below anything a lease could
// follow (one token in 17 minutes), and it lets the moving average end at zero.
const idleRate = 1e-3

// activeList is the apps the sync loop visits: every app but the quiet ones. mu guards apps.
type activeList struct {
	mu   sync.Mutex
	apps []*App
}

// add appends a (whose listed flag the caller has just set).
func (al *activeList) add(a *App) {
	al.mu.Lock()
	defer al.mu.Unlock()
	al.apps = append(al.apps, a)
}

// appendTo appends the listed apps to dst.
func (al *activeList) appendTo(dst []*App) []*App {
	al.mu.Lock()
	defer al.mu.Unlock()
	return append(dst, al.apps...)
}

// dropQuiet takes the quiet apps off the list at the end of a tick (syncer.mu held). Apps listed
// meanwhile are kept after the ones looked at.
func (al *activeList) dropQuiet() {
	al.mu.Lock()
	cur := al.apps
	al.apps = nil
	al.mu.Unlock()
	keep := cur[:0]
	for _, a := range cur {
		if a.quiet() {
			a.listed.Store(false)
			// A change made before the Store above may have seen the app still listed.
			if a.quiet() || !a.listed.CompareAndSwap(false, true) {
				continue
			}
		}
		keep = append(keep, a)
	}
	clear(cur[len(keep):]) // let the dropped apps be collected
	al.mu.Lock()
	defer al.mu.Unlock()
	al.apps = append(keep, al.apps...)
}

// list puts a on the sync loop's list unless it is on it. It is called after the change that
// gave the loop work.
func (a *App) list() {
	if a.listed.Load() || !a.listed.CompareAndSwap(false, true) {
		return
	}
	a.l.active.add(a)
}

// settled reports whether a holds no tokens, owes nothing and has nothing left to send: no local
// debt (the loop repays it, see repayDebts), no lease in flight, all its statistics acknowledged
// and all its cost reported.
func (a *App) settled() bool {
	a.mu.Lock()
	busy := a.call != nil
	a.mu.Unlock()
	return a.balance.Load() == 0 && !busy && a.statsSettled() && a.settledCost.Load() == a.costSent
}

// quiet reports whether the sync loop has nothing to do for a (syncer.mu held).
func (a *App) quiet() bool {
	return a.rate == 0 && a.consumed.Load() == a.lastCons.Load() && a.settled()
}

// visited is what one tick visits: the listed apps and the retired ones (syncer.mu held).
func (l *Limiter) visited() []*App {
	return l.cat.retired.appendUnlisted(l.active.appendTo(nil))
}
