// Package redislua is the Redis implementation of limiter.Store: Lua scripts embedded from .lua
// files (lua/), their Go wrappers and the key schema (docs/admin-api.md and docs/design.md).
//
// Keys (prefix default "ratelimit"; hash tags keep a cluster's keys in one slot and each app's
// keys in another, so every script touches exactly one slot and apps spread over the shards of a
// Redis Cluster):
//
//	<prefix>:{<cluster>}:l1          HASH  usage window, emergency state, seq:<instance>
//	<prefix>:{<cluster>}:nodes       ZSET  instance → last heartbeat (µs)
//	<prefix>:{<cluster>}:conn        HASH  instance → cluster in-flight count
//	<prefix>:{<cluster>/<app>}:l2    HASH  tokens, ts, debt, borrowed, consumed, requests, ttl, seq:<instance>,
//	                                       last_grant, warm_start, warm_granted (limiter.AppPolicy.Warmup)
//	<prefix>:{<cluster>/<app>}:conn  HASH  instance → "<in-flight>:<heartbeat µs>"
//
// The scripts follow the Store semantics operation for operation, like the memory store, so that
// both give bit-identical answers (floats are stored with %.17g). A Report is one pipeline: the
// cluster script and one script per app, one round trip. Because an app's slot cannot see the
// cluster's live-instance set, each app in-flight entry carries the time of the last report that
// carried the app and counts for InstanceTTL after it (the memory store does the same).
// Reports are idempotent (limiter.Report.Seq): the l1 hash and each app's l2 hash keep every
// instance's last applied Seq ("seq:<instance>" = "<seq>:<µs of its last numbered report>",
// dropped after limiter.ReportSeqTTL), so a report resent after a lost reply, or completed
// after a pipeline that failed half way, counts its figures once.
//
// Time is Redis TIME; WithClock substitutes an explicit time for tests. Scripts run with EVALSHA
// and fall back to EVAL on NOSCRIPT (a restarted or flushed server). Client retries are off: a
// lease whose reply was lost must not be debited twice.
package redislua
