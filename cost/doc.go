// Package cost turns a request into a cost in tokens: operation classification,
// the base table, bandwidth units and settlement of streaming bodies.
package cost
