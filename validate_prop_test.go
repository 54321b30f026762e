package tierbucket

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"pgregory.net/rapid"
)

// drawConfig draws a handler config whose fields range over valid and invalid values, or over
// valid values only.
func drawConfig(t *rapid.T, validOnly bool) *Handler {
	pick := func(valid, invalid []float64) []float64 {
		if validOnly {
			return valid
		}
		return append(append([]float64{}, valid...), invalid...)
	}
	picks := func(valid, invalid []string) []string {
		if validOnly {
			return valid
		}
		return append(append([]string{}, valid...), invalid...)
	}
	h := &Handler{
		Capacity:   rapid.SampledFrom(pick([]float64{0, 0, 1e6, 1e7}, []float64{100, 1000, -1})).Draw(t, "capacity"),
		UnknownApp: rapid.SampledFrom(picks([]string{"", "shared", "isolated", "reject"}, []string{"nope"})).Draw(t, "unknown_app"),
		OnRedisFailure: rapid.SampledFrom(picks([]string{"", "local", "open", "closed"}, []string{"maybe"})).
			Draw(t, "on_redis_failure"),
	}
	if rapid.Bool().Draw(t, "has_rr") {
		rr := rapid.SampledFrom(pick([]float64{0, 0.1, 0.5, 0.99}, []float64{1, -0.1, 1.5})).Draw(t, "reserved_ratio")
		h.ReservedRatio = &rr
	}
	if rapid.Bool().Draw(t, "has_thr") {
		thr := rapid.SampledFrom(pick([]float64{0.5, 0.95, 1}, []float64{0, -0.2, 1.1})).Draw(t, "emergency_threshold")
		h.EmergencyThreshold = &thr
	}
	if rapid.Bool().Draw(t, "has_ratios") {
		n := 4
		if !validOnly {
			n = rapid.IntRange(3, 5).Draw(t, "n_ratios")
		}
		h.EmergencyRatios = rapid.SliceOfN(rapid.SampledFrom(pick([]float64{0, 0.25, 1}, []float64{-0.5, 2})), n, n).Draw(t, "ratios")
	}
	if rapid.Bool().Draw(t, "has_adaptive") {
		h.Adaptive = &AdaptiveConfig{
			Min:           rapid.SampledFrom(pick([]float64{0, 50, 1e6}, []float64{-1, 2e7})).Draw(t, "adaptive.min"),
			Max:           rapid.SampledFrom(pick([]float64{0, 1e8}, []float64{1, -5})).Draw(t, "adaptive.max"),
			LatencyTarget: caddy.Duration(rapid.SampledFrom(pick([]float64{0, 1e8}, []float64{-1})).Draw(t, "adaptive.latency_target")),
			ThrottleStatus: rapid.SliceOfN(rapid.SampledFrom(picksInt([]int{429, 503, 500}, []int{200, 600}, validOnly)), 0, 3).
				Draw(t, "adaptive.throttle_status"),
		}
		if validOnly {
			h.Capacity = 1e7 // within [min, max]; guarantees fit in the default min
		}
	}
	ids := picks([]string{"a", "b.c", "d:e-f_1", "*"}, []string{"bad id", "x/y"})
	nApps := rapid.IntRange(0, 4).Draw(t, "n_apps")
	for i := 0; i < nApps; i++ {
		id := rapid.SampledFrom(ids).Draw(t, "id")
		if h.Apps == nil {
			h.Apps = map[string]*AppConfig{}
		}
		h.Apps[id] = &AppConfig{
			Guaranteed:     rapid.SampledFrom(pick([]float64{1, 10, 400, 2000}, []float64{0.5, 0, -3})).Draw(t, "guaranteed"),
			Burst:          rapid.SampledFrom(pick([]float64{0, 5000}, []float64{0.5, 1, 20, -1})).Draw(t, "burst"),
			Priority:       rapid.IntRange(0, 3).Draw(t, "priority"),
			MaxBorrow:      rapid.SampledFrom(pick([]float64{0, 10}, []float64{-1})).Draw(t, "max_borrow"),
			MaxConnections: rapid.SampledFrom([]int64{0, 5}).Draw(t, "max_connections"),
		}
		h.Apps[id].Max = rapid.SampledFrom(pick([]float64{0, h.Apps[id].Guaranteed, 1e6}, []float64{-1, 0.25})).Draw(t, "max")
	}
	return h
}

// validOracle is an independent statement of the config's validation rules.
func validOracle(h *Handler) bool {
	if h.Capacity < 0 {
		return false
	}
	rr := 0.1
	if h.ReservedRatio != nil {
		rr = *h.ReservedRatio
		if rr < 0 || rr >= 1 {
			return false
		}
	}
	if h.EmergencyThreshold != nil && (*h.EmergencyThreshold <= 0 || *h.EmergencyThreshold > 1) {
		return false
	}
	if h.EmergencyRatios != nil {
		if len(h.EmergencyRatios) != 4 {
			return false
		}
		for _, r := range h.EmergencyRatios {
			if r < 0 || r > 1 {
				return false
			}
		}
	}
	switch h.UnknownApp {
	case "", "shared", "isolated", "reject":
	default:
		return false
	}
	switch h.OnRedisFailure {
	case "", "local", "open", "closed":
	default:
		return false
	}
	sum := 0.0
	for id, a := range h.Apps {
		if id == "bad id" || id == "x/y" || id == "" || len(id) > 128 {
			return false
		}
		burst := a.Burst
		if burst == 0 {
			burst = max(a.Guaranteed, 1)
		}
		if a.Guaranteed <= 0 || burst < a.Guaranteed || burst < 1 || a.Priority < 0 || a.Priority > 3 ||
			a.MaxBorrow < 0 || a.MaxConnections < 0 || (a.Max != 0 && a.Max < a.Guaranteed) {
			return false
		}
		if id != "*" {
			sum += a.Guaranteed
		}
	}
	admission := h.Capacity
	if a := h.Adaptive; a != nil {
		lo, hi := a.Min, a.Max
		if lo == 0 {
			lo = h.Capacity / 4
		}
		if hi == 0 {
			hi = h.Capacity * 2
		}
		if h.Capacity <= 0 || lo <= 0 || lo > h.Capacity || hi < h.Capacity || a.LatencyTarget < 0 {
			return false
		}
		for _, st := range a.ThrottleStatus {
			if st < 400 || st > 599 {
				return false
			}
		}
	}
	return admission == 0 || sum <= (1-rr)*admission
}

// picksInt is picks for ints.
func picksInt(valid, invalid []int, validOnly bool) []int {
	if validOnly {
		return valid
	}
	return append(append([]int{}, valid...), invalid...)
}

// drawFaulty draws a valid config and then, most of the time, breaks exactly one rule of
// (or moves capacity right next to the admission bound, on either side).
func drawFaulty(t *rapid.T) *Handler {
	h := drawConfig(t, true)
	if len(h.Apps) == 0 {
		h.Apps = map[string]*AppConfig{"a": {Guaranteed: 10}}
	}
	var app *AppConfig
	for _, id := range sortedKeys(h.Apps) {
		app = h.Apps[id]
		break
	}
	f := func(v float64) *float64 { return &v }
	switch rapid.IntRange(0, 20).Draw(t, "fault") {
	case 1:
		app.Guaranteed = rapid.SampledFrom([]float64{0, -3}).Draw(t, "guaranteed")
	case 2:
		app.Guaranteed, app.Burst = 10, 5
	case 3:
		app.Guaranteed, app.Burst = 0.5, rapid.SampledFrom([]float64{0.5, 0.9}).Draw(t, "burst")
	case 4:
		app.Priority = rapid.SampledFrom([]int{-1, 4}).Draw(t, "priority")
	case 5:
		app.MaxBorrow = -1
	case 6:
		app.MaxConnections = -2
	case 7:
		h.Apps[rapid.SampledFrom([]string{"bad id", "x/y", "", strings.Repeat("z", 129)}).Draw(t, "id")] = &AppConfig{Guaranteed: 1}
	case 8:
		h.ReservedRatio = f(rapid.SampledFrom([]float64{1, -0.1, 1.5}).Draw(t, "rr"))
	case 9:
		h.EmergencyThreshold = f(rapid.SampledFrom([]float64{0, -0.2, 1.1}).Draw(t, "thr"))
	case 10:
		h.EmergencyRatios = []float64{1, 0.5, 0.1}
	case 11:
		h.EmergencyRatios = []float64{1, 0.5, rapid.SampledFrom([]float64{-0.5, 2}).Draw(t, "ratio"), 0}
	case 12:
		h.UnknownApp = "nope"
	case 13:
		h.OnRedisFailure = "maybe"
	case 14:
		h.Capacity = -1
	case 15, 16: // capacity just below / just above what the named apps' guarantees need
		rr := 0.1
		if h.ReservedRatio != nil {
			rr = *h.ReservedRatio
		}
		var sum float64
		for id, a := range h.Apps {
			if id != "*" {
				sum += a.Guaranteed
			}
		}
		if sum > 0 {
			factor := 0.99
			if rapid.Bool().Draw(t, "above") {
				factor = 1.01
			}
			h.Capacity = sum / (1 - rr) * factor
		}
	case 17: // an adaptive min below the guarantees (valid) or above the capacity
		h.Capacity = 1e7
		h.Adaptive = &AdaptiveConfig{Min: rapid.SampledFrom([]float64{0.5, 1e4, 2e7}).Draw(t, "adaptive.min")}
	case 18:
		h.Capacity = 1e7
		h.Adaptive = &AdaptiveConfig{Max: rapid.SampledFrom([]float64{1, 9e6}).Draw(t, "adaptive.max")}
	case 19:
		h.Capacity = rapid.SampledFrom([]float64{0, 1e7}).Draw(t, "capacity")
		h.Adaptive = &AdaptiveConfig{ThrottleStatus: []int{rapid.SampledFrom([]int{200, 302, 600, 429}).Draw(t, "status")}}
	case 20:
		app.Max = app.Guaranteed / 2
	}
	return h
}

// TestValidationProperty: limiterConfig accepts exactly the configs the oracle accepts
// (validation); every accepted config resolves to a sane policy.
func TestValidationProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var h *Handler
		if rapid.Bool().Draw(t, "faulty") {
			h = drawFaulty(t)
		} else {
			h = drawConfig(t, false)
		}
		cfg, err := h.limiterConfig()
		if want := validOracle(h); (err == nil) != want {
			b, _ := json.Marshal(h)
			t.Fatalf("config %s: error %v, oracle valid=%v", b, err, want)
		}
		if err == nil {
			for id, p := range cfg.Apps {
				if p.Burst < p.Guaranteed || p.Burst < 1 {
					t.Fatalf("app %s: resolved policy %+v", id, p)
				}
			}
		}
	})
}

// caddyfileFor renders the handler's fields as a rate_limit block.
func caddyfileFor(h *Handler) string {
	var b strings.Builder
	b.WriteString("rate_limit {\n")
	if h.Capacity != 0 {
		fmt.Fprintf(&b, "\tcapacity %v", h.Capacity)
		if a := h.Adaptive; a != nil {
			b.WriteString(" {\n\t\tadaptive {\n")
			if a.Min != 0 {
				fmt.Fprintf(&b, "\t\t\tmin %v\n", a.Min)
			}
			if a.Max != 0 {
				fmt.Fprintf(&b, "\t\t\tmax %v\n", a.Max)
			}
			if a.LatencyTarget != 0 {
				fmt.Fprintf(&b, "\t\t\tlatency_target %v\n", time.Duration(a.LatencyTarget))
			}
			if len(a.ThrottleStatus) > 0 {
				b.WriteString("\t\t\tthrottle_status")
				for _, st := range a.ThrottleStatus {
					fmt.Fprintf(&b, " %d", st)
				}
				b.WriteString("\n")
			}
			b.WriteString("\t\t}\n\t}")
		}
		b.WriteString("\n")
	}
	if h.UnknownApp != "" {
		fmt.Fprintf(&b, "\tunknown_app %s\n", h.UnknownApp)
	}
	if h.OnRedisFailure != "" {
		fmt.Fprintf(&b, "\ton_redis_failure %s\n", h.OnRedisFailure)
	}
	if h.ReservedRatio != nil {
		fmt.Fprintf(&b, "\treserved_ratio %v\n", *h.ReservedRatio)
	}
	if h.EmergencyThreshold != nil {
		fmt.Fprintf(&b, "\temergency_threshold %v\n", *h.EmergencyThreshold)
	}
	if len(h.EmergencyRatios) == 4 {
		fmt.Fprintf(&b, "\temergency_ratios %v %v %v %v\n", h.EmergencyRatios[0], h.EmergencyRatios[1],
			h.EmergencyRatios[2], h.EmergencyRatios[3])
	}
	for _, id := range sortedKeys(h.Apps) {
		a := h.Apps[id]
		fmt.Fprintf(&b, "\tapp %s {\n\t\tguaranteed %v\n", id, a.Guaranteed)
		if a.Burst != 0 {
			fmt.Fprintf(&b, "\t\tburst %v\n", a.Burst)
		}
		if a.Priority != 0 {
			fmt.Fprintf(&b, "\t\tpriority %d\n", a.Priority)
		}
		if a.MaxBorrow != 0 {
			fmt.Fprintf(&b, "\t\tmax_borrow %v\n", a.MaxBorrow)
		}
		if a.Max != 0 {
			fmt.Fprintf(&b, "\t\tmax %v\n", a.Max)
		}
		if a.MaxConnections != 0 {
			fmt.Fprintf(&b, "\t\tmax_connections %d\n", a.MaxConnections)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// TestCaddyfileRoundTripProperty: every valid config written as a Caddyfile block parses back
// to the same JSON.
func TestCaddyfileRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := drawConfig(t, true)
		if !validOracle(h) {
			t.Fatalf("the valid-only generator drew an invalid config")
		}
		src := caddyfileFor(h)
		var got Handler
		if err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(src)); err != nil {
			t.Fatalf("parse %q: %v", src, err)
		}
		want, _ := json.Marshal(h)
		have, _ := json.Marshal(&got)
		if string(want) != string(have) {
			t.Fatalf("round trip of\n%s\nwant %s\ngot  %s", src, want, have)
		}
	})
}
