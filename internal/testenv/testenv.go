// Package testenv decides what a test does when its machine lacks something it needs.
package testenv

import (
	"os"
	"testing"
)

// Missing ends a test that cannot run here: a skip on a developer's machine, a failure in CI
// (the environment variable CI set), where scripts/test.sh installs everything and a skip would
// hide what the test checks.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
		return // a TB that records instead of ending the test: one ending only
	}
	t.Skip(why)
}
