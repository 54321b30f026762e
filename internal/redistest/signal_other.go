//go:build !unix

package redistest

import "os"

// Without SIGSTOP/SIGCONT, Pause and Resume do nothing.
var pauseSignal, resumeSignal os.Signal
