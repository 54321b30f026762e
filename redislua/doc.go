// Package redislua is the Redis implementation of store.Store: Lua scripts embedded from .lua
// files (lua/), their Go wrappers, the key schema and the client options (TLS, ACL users,
// Cluster, Sentinel).
//
// Every operation is one script touching one hash slot; the scripts follow the Store semantics
// operation for operation, like the memory store, so both give identical answers (floats are
// stored with %.17g). Time is Redis TIME; WithClock substitutes an explicit time for tests.
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT. Client retries are off: a lease
// whose reply was lost must not be debited twice. The key schema, what each key holds and when
// it expires are in docs/design.md ("The Store and its key schema"); the ACL a gateway needs is
// in docs/security.md.
package redislua
