package e2e

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill Caddy when the test binary dies, so an interrupted run
// leaves no process behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
