package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// caddyBin is the Caddy binary built by TestMain ("" with -short: the tests skip).
var caddyBin string

// TestMain builds Caddy with tierbucket once for the whole package, from the repository root
// (the parent of this directory), and removes it afterwards.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // every test skips (requireCaddy)
	}
	dir, err := os.MkdirTemp("", "tierbucket-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bin := filepath.Join(dir, "caddy")
	build := exec.Command(goTool(), "build", "-o", bin, "./cmd/caddy")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build ./cmd/caddy:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	caddyBin = bin
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command that runs this test (the one on PATH, else the toolchain's own).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // the test binary runs where it was built: its GOROOT exists
}

// requireCaddy skips the test under -short (no binary was built).
func requireCaddy(t *testing.T) {
	t.Helper()
	if caddyBin == "" {
		t.Skip("e2e: skipped with -short (needs the Caddy binary and redis-server)")
	}
}
