// Package settings turns the rate limiter's settings as written into the limiter's
// configuration: the Caddy handler's fields (Caddyfile and JSON) and the Go library's Options
// (package ratelimit) both go through it, so they share one set of defaults, one validation
// and one set of error messages, each naming the field as the Caddyfile does.
package settings
