// Package redislua is the Redis implementation of limiter.Store: Lua scripts embedded from .lua
// files, their Go wrappers and the key schema of DESIGN §6.
package redislua
