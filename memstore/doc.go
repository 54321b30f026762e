// Package memstore is the in-memory implementation of store.Store: the embedded default, for a
// single gateway without Redis, and the reference the Redis store is tested against (the shared
// suite store/storetest and the differential test in redislua). It gives the same answers as
// the Redis store for the same calls and the same clock.
package memstore
