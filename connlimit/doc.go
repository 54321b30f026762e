// Package connlimit counts in-flight requests per app and per cluster and enforces their limits,
// locally and fleet-wide.
//
// One Counter serves one cluster. Acquire admits a request only if, first for the cluster and
// then for the app, the count stays below the limit; the counts move by compare-and-swap, so no
// concurrent reader ever sees a count above its limit, and a request refused by its app's limit
// gives its cluster slot straight back.
//
// Fleet-wide (UseSlots), each scope's limit is shared through slots leased from the Store: the
// instance holds a number of slots per scope and admits locally while its count fits its holding;
// only growing or shrinking a holding calls the Store, one call at a time per scope, and the
// Store never lets the live instances' holdings add up to more than the limit
// (docs/design.md, "Connection slots"). Without slots the limits are this instance's.
//
// Tickets are released exactly once: by their holder or, if idle for longer than IdleTimeout, by
// the leak sweep, which counts them as leaked. Active tickets sit in one of a fixed set of
// sharded intrusive lists, each under its own small mutex, so the sweep finds them without a
// global lock on the request path; a released ticket goes on its shard's free list under the
// same mutex, so taking and giving back a ticket is one critical section each. A recycled
// Ticket carries a generation;
// a Handle (ticket + generation) can never release a later request's slot, which makes it the
// right thing to keep where several paths may release (a hijacked connection's Close and the
// handler's return).
//
// Per-app counters live in a copy-on-write map read lock-free. The set is bounded because the
// caller passes only configured app ids and "*" (every unknown app); MaxApps is a backstop.
// Peaks are this instance's.
package connlimit
