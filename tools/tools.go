//go:build tools

// Package tools pins the build tools (xcaddy) apart from the plugin's own go.mod, so plugin users
// do not inherit their dependencies.
package tools
