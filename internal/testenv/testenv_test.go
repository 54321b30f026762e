package testenv

import (
	"runtime"
	"testing"
)

// recorder is a testing.TB that records how a test ended instead of ending one.
type recorder struct {
	testing.TB
	ended string
}

func (r *recorder) Helper()      {}
func (r *recorder) Fatal(...any) { r.ended = "fatal"; runtime.Goexit() }
func (r *recorder) Skip(...any)  { r.ended = "skip"; runtime.Goexit() }

func ending(ci string, t *testing.T) string {
	t.Setenv("CI", ci)
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Missing(r, "x is missing")
	}()
	<-done
	return r.ended
}

// TestMissingFailsInCI: in CI a missing dependency fails the test; elsewhere it skips it.
func TestMissingFailsInCI(t *testing.T) {
	if got := ending("true", t); got != "fatal" {
		t.Errorf("CI=true: %s, want fatal", got)
	}
	if got := ending("", t); got != "skip" {
		t.Errorf("CI unset: %s, want skip", got)
	}
}
