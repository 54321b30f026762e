package tierbucket

import "testing"

// Only `caddy validate` and `caddy adapt --validate` are validations: the start-up probe fails
// them on a configuration Redis refuses, while `caddy run` keeps serving.
func TestProbeValidateCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"caddy", "validate", "--config", "Caddyfile"}, true},
		{[]string{"caddy", "adapt", "--config", "Caddyfile", "--validate"}, true},
		{[]string{"caddy", "adapt", "--validate=true", "--config", "Caddyfile"}, true},
		{[]string{"caddy", "adapt", "--validate=false"}, false},
		{[]string{"caddy", "adapt", "--config", "Caddyfile"}, false},
		{[]string{"caddy", "adapt", "--", "--validate"}, false},
		{[]string{"caddy", "run", "--config", "validate"}, false},
		{[]string{"caddy", "reload", "--config", "Caddyfile"}, false},
		{[]string{"caddy"}, false},
		{nil, false},
	} {
		if got := isValidateCommand(c.args); got != c.want {
			t.Errorf("%q: validating %v, want %v", c.args, got, c.want)
		}
	}
}
