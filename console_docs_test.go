package tierbucket

import (
	"os"
	"strings"
	"testing"
)

// TestConsoleDocsSiteExamples keeps the site examples of docs/console.md true: each adapts,
// with the console (rate_limit_console) behind the authentication it shows.
func TestConsoleDocsSiteExamples(t *testing.T) {
	doc, err := os.ReadFile("docs/console.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, block := range strings.Split(string(doc), "```\n")[1:] {
		if !strings.HasPrefix(block, "ops.example.com {") && !strings.HasPrefix(block, "example.com {") {
			continue
		}
		n++
		js, err := adapt(t, block)
		if err != nil {
			t.Errorf("example %d does not adapt: %v\n%s", n, err, block)
			continue
		}
		js = strings.Join(strings.Fields(js), "")
		console := strings.Index(js, `"handler":"rate_limit_console"`)
		auth := max(strings.Index(js, `"handler":"authentication"`), strings.Index(js, `"client_authentication"`))
		if console < 0 || auth < 0 {
			t.Errorf("example %d: console at %d, authentication at %d:\n%s", n, console, auth, js)
		}
	}
	if n != 3 {
		t.Errorf("%d site examples in docs/console.md, want 3", n)
	}
}
