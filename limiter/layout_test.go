package limiter

import (
	"testing"
	"unsafe"
)

// The fields every admitted request writes share one 64-byte line of App (an App falls in the
// allocator's 384-byte class, whose objects start at multiples of 64): a field added above them must not push them across.
func TestHotFieldsShareALine(t *testing.T) {
	var a App
	first := unsafe.Offsetof(a.balance)
	if first%64 != 0 {
		t.Errorf("balance at offset %d, want a multiple of 64", first)
	}
	for name, off := range map[string]uintptr{
		"consumed": unsafe.Offsetof(a.consumed),
		"requests": unsafe.Offsetof(a.requests), "settledCost": unsafe.Offsetof(a.settledCost),
		"refillAt": unsafe.Offsetof(a.refillAt), "l2Left": unsafe.Offsetof(a.l2Left),
	} {
		if off/64 != first/64 {
			t.Errorf("%s at offset %d, not on balance's line (%d-%d)", name, off, first, first+63)
		}
	}
}
