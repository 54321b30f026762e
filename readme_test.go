package tierbucket

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestReadmeExample keeps the README's Caddyfile example true: it adapts, its handler decodes
// strictly, and it provisions (on the memory store: the example's Redis addresses are not
// reachable from a test).
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```caddyfile\n")
	if !ok {
		t.Fatal("README.md has no caddyfile block")
	}
	src, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md: unterminated caddyfile block")
	}
	cfg, err := adapt(t, src)
	if err != nil {
		t.Fatalf("the README's example does not adapt: %v", err)
	}
	checkHandlersDecode(t, cfg)

	var root any
	if err := json.Unmarshal([]byte(cfg), &root); err != nil {
		t.Fatal(err)
	}
	var handlers []*Handler
	var find func(v any)
	find = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "rate_limit" {
				b, _ := json.Marshal(v)
				h := new(Handler)
				if err := json.Unmarshal(b, h); err != nil {
					t.Fatal(err)
				}
				handlers = append(handlers, h)
			}
			for _, x := range v {
				find(x)
			}
		case []any:
			for _, x := range v {
				find(x)
			}
		}
	}
	find(root)
	if len(handlers) != 1 {
		t.Fatalf("found %d rate_limit handlers in the README's example, want 1:\n%s", len(handlers), cfg)
	}
	h := handlers[0]
	if h.Redis == nil || h.Redis.Password != "{env.REDIS_PASSWORD}" {
		t.Errorf("the example's redis block did not survive adapting: %+v", h.Redis)
	}
	h.Redis = nil
	if err := setupOn(t, newCtx(t), h); err != nil {
		t.Fatalf("the README's example does not provision: %v", err)
	}
}
