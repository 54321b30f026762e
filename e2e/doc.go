// Package e2e holds the end-to-end tests of tierbucket: the real Caddy binary (built once from
// ./cmd/caddy by TestMain), several Caddy processes sharing real redis-server processes, driven
// over loopback HTTP and observed through the admin /metrics and the Redis keys.
//
// The package has no code of its own; run its tests with `go test -v ./e2e/` (they skip with
// -short). Every load loop is bounded in count and in time, every process is killed at cleanup,
// and each Caddy's log is written to a file that is printed when a test fails.
package e2e
