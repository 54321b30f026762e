// Package connlimit counts in-flight requests per app and per cluster and enforces their limits,
// locally and fleet-wide (DESIGN §7).
package connlimit
