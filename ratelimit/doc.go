// Package ratelimit is tierbucket's limiter for Go programs: the same hierarchical,
// cost-weighted token buckets as the Caddy plugin, with the same Store. A Go service pointed at
// the same Redis, key prefix and cluster id as a fleet of Caddy gateways draws from the same
// quotas, and follows the same admin overrides and operator emergency.
//
// It reads like golang.org/x/time/rate with a key per call:
//
//	lim, err := ratelimit.New(ratelimit.Options{Apps: map[string]ratelimit.App{"alpha": {Guaranteed: 100, Burst: 200}}})
//	defer lim.Close()
//	if d := lim.AllowN(ctx, "alpha", 5); !d.Allowed {
//		// d.Reason, d.RetryAfter
//	}
//	err = lim.Wait(ctx, "alpha", 5) // blocks until the tokens are taken or ctx is done
//
// Keys are app ids (1-128 characters of [A-Za-z0-9._:-]); costs are tokens (> 0). A decision
// the local tokens cover takes no lock and makes no Store call; the Store is called in batches.
// Misuse is an error (Decision.Err, or Wait's error), never a panic. Middleware puts a
// Limiter in front of a net/http handler with the plugin's responses.
//
// docs/library.md describes the options, the failure modes and how to share quotas with a
// Caddy fleet.
package ratelimit
