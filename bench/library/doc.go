// Package library holds the distributed benchmark of package ratelimit, the limiter for Go
// programs: its AllowN on a real redis-server beside go-redis/redis_rate, a limiter that calls
// Redis on every decision. The figures and the command are in docs/library.md.
package library
