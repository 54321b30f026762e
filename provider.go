package tierbucket

import (
	"unsafe"

	"github.com/caddyserver/caddy/v2"
)

// The placeholder provider without an allocation of its own (docs/performance.md, "The
// placeholder provider").
//
// Caddy's Replacer.Map takes a function, and a method value o.placeholder is a closure the
// compiler allocates for every request: two words, the code of the method's wrapper and the
// receiver. An outcome begins with those same two words (providerHeader), so it is that
// closure itself, and the request's one allocation serves both. The layout is checked once at
// start against a method value the compiler built; should a Go release change it, provider
// falls back to the method value, correct and one allocation dearer, and
// TestPlaceholderProviderInline fails so that the change is noticed.

// providerHeader is the layout of a method value's closure: the wrapper's code, the receiver.
type providerHeader struct {
	code uintptr
	recv *outcome
}

// placeholderCode is the code of (*outcome).placeholder's method-value wrapper, or 0 when the
// closure layout is not the expected one.
var placeholderCode = methodValueCode()

// methodValueCode reads the wrapper's code from a method value the compiler built, checks that
// its second word is the receiver, and that a closure assembled from the two words calls the
// method on the right outcome.
func methodValueCode() uintptr {
	probe := &outcome{result: result{app: "probe"}}
	f := caddy.ReplacerFunc(probe.placeholder)
	words := *(**[2]unsafe.Pointer)(unsafe.Pointer(&f))
	if words[1] != unsafe.Pointer(probe) {
		return 0
	}
	check := &outcome{result: result{app: "check"}}
	check.self = providerHeader{code: uintptr(words[0]), recv: check}
	if v, ok := check.inlineProvider()(phPrefix + "app"); !ok || v != "check" {
		return 0
	}
	return uintptr(words[0])
}

// provider is the function the request's replacer calls for the placeholders: o itself when
// the layout allows, otherwise the method value.
func (o *outcome) provider() caddy.ReplacerFunc {
	if placeholderCode == 0 {
		return o.placeholder
	}
	o.self = providerHeader{code: placeholderCode, recv: o}
	return o.inlineProvider()
}

// inlineProvider reinterprets o, which begins with a providerHeader, as a function value (a
// pointer to a closure). The garbage collector sees a pointer to o, as it would to a closure.
func (o *outcome) inlineProvider() caddy.ReplacerFunc {
	p := unsafe.Pointer(o)
	return *(*caddy.ReplacerFunc)(unsafe.Pointer(&p))
}
