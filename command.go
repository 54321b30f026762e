package tierbucket

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// validating reports whether this process is `caddy validate` (or `caddy adapt --validate`).
// Caddy provisions the modules the same way for validation and for running, and only the
// command line tells them apart: validation must fail on a configuration Redis refuses, while
// a first start comes up under the rescue limits and logs it. It is read once, here at the
// edge, and handed to the cluster package as an option.
var validating = sync.OnceValue(func() bool { return isValidateCommand(os.Args) })

func isValidateCommand(args []string) bool {
	if len(args) < 2 {
		return false
	}
	switch args[1] {
	case "validate":
		return true
	case "adapt":
		for _, a := range args[2:] {
			if a == "--" {
				break
			}
			if a == "--validate" {
				return true
			}
			if v, ok := strings.CutPrefix(a, "--validate="); ok {
				b, err := strconv.ParseBool(v)
				return err == nil && b
			}
		}
	}
	return false
}
