//go:build !linux

package e2e

import "os/exec"

// setDeathSignal is Linux-only; elsewhere the cleanups stop the processes.
func setDeathSignal(cmd *exec.Cmd) {}
