//go:build !linux

package redistest

import "os/exec"

// setDeathSignal is Linux-only; elsewhere t.Cleanup and Main stop the servers.
func setDeathSignal(cmd *exec.Cmd) {}
