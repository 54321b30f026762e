package cost

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		err  string // substring; "" = valid
	}{
		{"zero is all defaults", Config{}, ""},
		{"http", Config{Operations: "http"}, ""},
		{"S3 any case", Config{Operations: "S3"}, ""},
		{"bad operations", Config{Operations: "grpc"}, `cost.operations must be s3 or http, got "grpc"`},
		{"negative quantum", Config{Quantum: -5}, "cost.quantum must be > 0, got -5"},
		{"negative bandwidth", Config{Bandwidth: Int(-1)}, "cost.bandwidth must be >= 0, got -1"},
		{"negative max", Config{Max: -1}, "cost.max must be > 0, got -1"},
		{"negative default", Config{Default: Int(-2)}, "cost.default must be >= 0, got -2"},
		{"negative stream_estimate", Config{StreamEstimate: -1}, "cost.stream_estimate must be >= 0, got -1"},
		{"unknown base", Config{Base: map[string]int64{"FOO": 1}}, `cost.base: unknown operation "FOO"`},
		{"negative base", Config{Base: map[string]int64{"put": -1}}, "cost.base put must be >= 0, got -1"},
		{"base named twice", Config{Base: map[string]int64{"put": 3, "PUT": 4}}, `cost.base: "PUT" and "put" name the same operation PUT`},
		{"base zero ok", Config{Base: map[string]int64{"HEAD": 0, "copy": 100}}, ""},
		{"all set", Config{Operations: "s3", Quantum: 1, Bandwidth: Int(2), Max: 3, Default: Int(4), StreamEstimate: 5, ResponseBytes: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			_, newErr := New(tt.c)
			if tt.err == "" {
				if err != nil || newErr != nil {
					t.Fatalf("want valid, got %v / %v", err, newErr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Validate: got %v, want %q", err, tt.err)
			}
			if newErr == nil || newErr.Error() != err.Error() {
				t.Fatalf("New: got %v, want %v", newErr, err)
			}
		})
	}
}

func TestDefaultsApplied(t *testing.T) {
	c := mustNew(t, Config{}).Config()
	if c.Operations != "s3" || c.Quantum != 65536 || *c.Bandwidth != 1 || c.Max != 1_000_000 ||
		*c.Default != 1 || c.StreamEstimate != 1<<20 || c.ResponseBytes {
		t.Fatalf("defaults: %+v", c)
	}
}

// 0 is a real setting for bandwidth (no per-byte charge) and default (free unknown methods):
// only an unset field takes the default.
func TestZeroBandwidthAndDefault(t *testing.T) {
	m := mustNew(t, Config{Bandwidth: Int(0), Default: Int(0)})
	if got := m.Cost(OpPut, 1<<30); got != m.Base(OpPut) {
		t.Errorf("bandwidth 0: PUT of 1 GiB costs %d, want only its base %d", got, m.Base(OpPut))
	}
	if got := m.Cost(OpOther, 0); got != 0 {
		t.Errorf("default 0: OTHER costs %d, want 0", got)
	}
	if got := mustNew(t, Config{}).Cost(OpPut, 1<<16); got != 5+1 {
		t.Errorf("unset bandwidth: PUT of 64 KiB costs %d, want 6", got)
	}
}
