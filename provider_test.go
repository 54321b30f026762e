package tierbucket

import (
	"runtime"
	"strconv"
	"testing"
)

// TestPlaceholderProviderInline: on this Go release an outcome is its own placeholder
// provider. A failure means the compiler's closure layout changed: the handler still works
// through the method value, at one more allocation per request (provider.go).
func TestPlaceholderProviderInline(t *testing.T) {
	if placeholderCode == 0 {
		t.Fatal("the closure layout check failed: the placeholder provider allocates again")
	}
}

// garbage keeps the test's garbage from being allocated on the stack.
var garbage []byte

// TestPlaceholderProviderSurvivesGC: providers kept only by what the replacer holds (the
// function values) keep their outcomes alive and answer with their own values, through
// garbage collections, both inline and through the fallback.
func TestPlaceholderProviderSurvivesGC(t *testing.T) {
	for _, inline := range []bool{true, false} {
		saved := placeholderCode
		if !inline {
			placeholderCode = 0
		}
		const n = 2000
		providers := make([]func(string) (any, bool), n)
		for i := range providers {
			o := &outcome{result: result{app: "app-" + strconv.Itoa(i), cost: int64(i)}}
			providers[i] = o.provider()
			garbage = make([]byte, 512) // between them, so that the heap moves on
		}
		runtime.GC()
		runtime.GC()
		for i, p := range providers {
			app, ok := p(phPrefix + "app")
			cost, _ := p(phPrefix + "cost")
			if !ok || app != "app-"+strconv.Itoa(i) || cost != strconv.Itoa(i) {
				t.Fatalf("inline %v: provider %d answers app %v, cost %v", inline, i, app, cost)
			}
			if v, ok := p("http.request.uri"); ok {
				t.Fatalf("inline %v: provider %d answers a key not its own: %v", inline, i, v)
			}
		}
		placeholderCode = saved
	}
}
