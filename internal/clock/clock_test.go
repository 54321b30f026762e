package clock

import (
	"testing"
	"time"
)

func TestManual(t *testing.T) {
	m := NewManual()
	if !m.Now().Equal(Start) {
		t.Fatalf("starts at %v, want %v", m.Now(), Start)
	}
	m.Advance(1500 * time.Millisecond)
	if got := m.Now().Sub(Start); got != 1500*time.Millisecond {
		t.Fatalf("advanced %v, want 1.5s", got)
	}
	later := Start.Add(time.Hour)
	m.Set(later)
	if !m.Now().Equal(later) || m.Now().Location() != time.UTC {
		t.Fatalf("set to %v, want %v in UTC", m.Now(), later)
	}
	if _, ok := Or(nil).(System); !ok {
		t.Fatal("Or(nil) is not the system clock")
	}
	if Or(m) != Clock(m) {
		t.Fatal("Or(m) is not m")
	}
}
