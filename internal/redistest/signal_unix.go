//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// The signals that freeze and continue a process.
var pauseSignal, resumeSignal os.Signal = syscall.SIGSTOP, syscall.SIGCONT
