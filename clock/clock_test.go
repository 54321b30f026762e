package clock

import (
	"context"
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
	if !m.Sleep(context.Background(), time.Second) || !m.Now().Equal(later.Add(time.Second)) {
		t.Fatalf("Sleep did not advance the manual clock: %v", m.Now())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if m.Sleep(ctx, time.Second) || System.Sleep(System{}, ctx, time.Hour) {
		t.Fatal("Sleep with a done context reported the full time")
	}
	if _, ok := Or(nil).(System); !ok {
		t.Fatal("Or(nil) is not the system clock")
	}
	if Or(m) != Clock(m) {
		t.Fatal("Or(m) is not m")
	}
}
