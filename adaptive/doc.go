// Package adaptive is the control law of adaptive L1 capacity (docs/adaptive.md): from what
// the fleet saw of the backend in one control period — its answers, how many of them were
// throttles, how many came slower than the latency target, and the admitted cost per second —
// it computes the capacity of the next period. It is pure and deterministic: both Stores run
// the same law (the Redis Store in Lua, the memory Store through this package), and the tests
// check its properties here.
package adaptive
