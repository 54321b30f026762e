// Package store is the contract between a gateway and the state it shares with the rest of its
// fleet: the Store interface (L2 app buckets, the L1 cluster ledger, overrides, the operator
// emergency, connection slots), the values its calls carry, the rejection reasons, and the
// validation of policies and calls. It holds no state and depends on nothing else in the module,
// so the limiter, the connection counter and both Store implementations (memstore and redislua)
// can share its vocabulary.
//
// Both implementations give identical answers for identical calls; the behavioural suite in
// store/storetest runs against each of them. The semantics, the key schema of the Redis store
// and the reasons behind them are described in docs/design.md.
package store
