//go:build adaptiveharness

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// The adaptive-capacity harness (docs/adaptive.md): a storage backend whose capacity moves
// (nominal, halved, restored, doubled) under twice its nominal capacity of offered load from
// two tenants — gold (P0) and bronze (P3), guarantees sized on the nominal capacity, max above
// them — through two real Caddy gateways on one real Redis. It runs the same phases with a
// learned capacity and with the static one, after a warm-up phase at the nominal capacity, and
// reports per phase, over the seconds [settle, phase) after each change: the backend's throttles as a share of its answers, the
// goodput against what the backend can serve, gold's goodput against min(its guaranteed, the
// capacity), and the backend's p90 time to response headers.
//
// It takes minutes and loads both cores, so it is built only with the adaptiveharness tag
// (`go test -tags adaptiveharness`; the command is in docs/adaptive.md). TIERBUCKET_ADAPTIVE_SVG=<file> writes the plot of learned
// against real capacity.

const (
	harnessNominal    = 400.0 // the backend's nominal capacity, cost/s (one GET costs 1)
	harnessGoldG      = 240.0
	harnessGoldMax    = 480.0
	harnessBronzeG    = 80.0
	harnessBronzeMax  = 240.0
	harnessQueueBound = 250 * time.Millisecond // past this wait the backend answers 503 SlowDown
	harnessTarget     = 100 * time.Millisecond // latency_target
)

// harnessPhase is one capacity of the backend, held for its duration.
type harnessPhase struct {
	name     string
	capacity float64
}

var harnessPhases = []harnessPhase{
	{"nominal", harnessNominal},
	{"halved", harnessNominal / 2},
	{"restored", harnessNominal},
	{"doubled", harnessNominal * 2},
}

func TestAdaptiveHarness(t *testing.T) {
	requireCaddy(t)
	phase := 20 * time.Second
	if s := os.Getenv("TIERBUCKET_ADAPTIVE_PHASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		phase = d
	}
	settle := phase / 2
	addr, _ := redistest.Standalone(t)
	var series []harnessRun
	runs := []bool{true, false}
	if os.Getenv("TIERBUCKET_ADAPTIVE_ONLY") != "" {
		runs = runs[:1] // the learned capacity alone, for a quicker look at the law
	}
	for _, adaptive := range runs {
		series = append(series, runHarness(t, addr, adaptive, phase, settle))
	}
	for _, r := range series {
		for _, p := range r.phases {
			t.Logf("%-8s %-8s capacity %4.0f: throttles %5.2f %% of %5d answers, goodput %4.0f/s = %5.1f %% of %4.0f, gold %4.0f/s (min(g, C) %4.0f), p90 %4dms",
				r.name, p.name, p.capacity, 100*p.throttleShare, p.answers, p.goodput, 100*p.goodput/p.servable,
				p.servable, p.gold, min(harnessGoldG, p.capacity), p.p90.Milliseconds())
		}
	}
	// What the learned capacity must hold whatever the backend does: the backend's throttles
	// under 1 % of its answers and its p90 within the target, in every phase. The goodput and
	// P0 figures are measured, not asserted (docs/adaptive.md).
	for _, p := range series[0].phases {
		if p.throttleShare >= 0.01 || p.p90 > harnessTarget {
			t.Errorf("adaptive, %s: throttles %.2f %% of %d answers, p90 %v (target %v)",
				p.name, 100*p.throttleShare, p.answers, p.p90, harnessTarget)
		}
	}
	if out := os.Getenv("TIERBUCKET_ADAPTIVE_SVG"); out != "" {
		if err := os.WriteFile(out, []byte(harnessSVG(series, phase)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// harnessRun is one run's figures: per phase, and the learned capacity second by second.
type harnessRun struct {
	name    string
	phases  []phaseFigures
	learned []float64 // per second; the static run: its configured capacity
	real    []float64
	served  []float64 // backend answers 200 per second
}

type phaseFigures struct {
	name                   string
	capacity, servable     float64
	answers                int
	throttleShare, goodput float64
	gold                   float64
	p90                    time.Duration
}

func runHarness(t *testing.T, addr string, adaptive bool, phase, settle time.Duration) harnessRun {
	name, block := "static", ""
	if adaptive {
		name = "adaptive"
		block = fmt.Sprintf(` {
			adaptive {
				min %g
				max %g
				latency_target %s
			}
		}`, harnessNominal/4, harnessNominal*2.5, harnessTarget)
	}
	backend := newStorageBackend(harnessNominal, harnessQueueBound)
	defer backend.srv.Close()
	prefix := "e2e-adaptive-" + name
	site := fmt.Sprintf(`	rate_limit {
		cluster harness
		key {http.request.header.X-App-Id}
		unknown_app reject
		capacity %g%s
		app gold {
			guaranteed %g
			burst %g
			max %g
		}
		app bronze {
			guaranteed %g
			burst %g
			priority 3
			max %g
		}
		redis {
			address %s
			key_prefix %s
		}
	}
	reverse_proxy %s`, harnessNominal, block, harnessGoldG, harnessGoldG, harnessGoldMax,
		harnessBronzeG, harnessBronzeG, harnessBronzeMax, addr, prefix, strings.TrimPrefix(backend.srv.URL, "http://"))
	gws := []*gateway{startGateway(t, name+"-a", site), startGateway(t, name+"-b", site)}
	f := newFleet(t, addr, prefix, "harness")
	f.waitLive(gws...)
	defer func() {
		for _, g := range gws {
			g.stop()
		}
	}()

	run := harnessRun{name: name}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := newClient(t, 5*time.Second, 256)
	var wg sync.WaitGroup
	var inflight atomic.Int64
	// Open-loop offered load: 2 × nominal in all, half each tenant, split over the gateways.
	rate := 2 * harnessNominal / 4 // per tenant per gateway
	for _, g := range gws {
		for _, app := range []string{"gold", "bronze"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					if inflight.Load() > 1000 {
						continue // the client's own bound: never more than this in flight
					}
					inflight.Add(1)
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer inflight.Add(-1)
						_, _, _ = get(client, g.base, "/bucket/object", app)
					}()
				}
			}()
		}
	}
	backend.mu.Lock()
	backend.start = time.Now()
	backend.mu.Unlock()
	begin := time.Now()
	sampleDone := make(chan struct{})
	go func() { // the learned capacity, once a second
		defer close(sampleDone)
		for i := 0; ; i++ {
			next := begin.Add(time.Duration(i+1) * time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next)):
			}
			c, _ := f.rdb.HGet(context.Background(), prefix+":{harness}:l1", "cap").Float64()
			if os.Getenv("TIERBUCKET_ADAPTIVE_TRACE") != "" {
				v, _ := f.rdb.HMGet(context.Background(), prefix+":{harness}:l1", "lp", "chg").Result()
				t.Logf("%s t=%ds cap %.0f lp %v chg %v", name, i+1, c, v[0], v[1])
			}
			backend.mu.Lock()
			real := backend.capacity
			backend.mu.Unlock()
			run.learned = append(run.learned, c)
			run.real = append(run.real, real)
		}
	}()
	// A warm-up phase at the nominal capacity, not measured: the buckets start full, and the
	// opening bursts of both tenants hit the backend at once in either run.
	time.Sleep(time.Until(begin.Add(phase)))
	for i, p := range harnessPhases {
		backend.setCapacity(p.capacity)
		time.Sleep(time.Until(begin.Add(phase + time.Duration(i+1)*phase)))
		from := int64((phase + time.Duration(i)*phase + settle) / time.Second)
		to := int64((phase + time.Duration(i+1)*phase) / time.Second)
		served, total, throttled, p90 := backend.window(from, to)
		ctl, _ := f.rdb.HMGet(context.Background(), prefix+":{harness}:l1", "lp", "chg").Result()
		t.Logf("%s %s: controller's last period %v, last change %v", name, p.name, ctl[0], ctl[1])
		secs := float64(to - from)
		servable := min(p.capacity, min(harnessGoldMax, harnessNominal)+min(harnessBronzeMax, harnessNominal))
		fig := phaseFigures{
			name: p.name, capacity: p.capacity, servable: servable, answers: total + throttled,
			goodput: float64(total) / secs, gold: float64(served["gold"]) / secs, p90: p90,
		}
		if total+throttled > 0 {
			fig.throttleShare = float64(throttled) / float64(total+throttled)
		}
		run.phases = append(run.phases, fig)
	}
	cancel()
	wg.Wait()
	<-sampleDone
	for i := range run.learned {
		served, _, _, _ := backend.window(int64(i), int64(i+1))
		run.served = append(run.served, float64(served["gold"]+served["bronze"]))
	}
	return run
}

// harnessSVG plots, per run, the real capacity, the learned one and what the backend served,
// second by second.
func harnessSVG(runs []harnessRun, phase time.Duration) string {
	const w, h, pad = 760, 260, 40
	var b strings.Builder
	total := len(runs) * (h + pad)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, total)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for k, r := range runs {
		y0 := k*(h+pad) + pad
		n := max(len(r.real), 1)
		ymax := harnessNominal * 2.5
		x := func(i int) float64 { return pad + float64(i)*float64(w-2*pad)/float64(n) }
		y := func(v float64) float64 { return float64(y0+h-pad) - v/ymax*float64(h-2*pad) }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s capacity: real (grey), learned (blue), served by the backend (green), cost/s over seconds</text>`+"\n", pad, y0-8, r.name)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", pad, y(0), w-pad, y(0))
		for v := 0.0; v <= ymax; v += 200 {
			fmt.Fprintf(&b, `<text x="2" y="%.1f">%.0f</text><line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", y(v)+4, v, pad, y(v), w-pad, y(v))
		}
		for i := 0; i <= len(harnessPhases)+1; i++ {
			sec := i * int(phase/time.Second)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%ds</text>`+"\n", x(sec)-8, y(0)+14, sec)
		}
		for _, s := range []struct {
			vals  []float64
			color string
			width float64
		}{{r.real, "#999", 4}, {r.served, "#2a2", 1.5}, {r.learned, "#14c", 2}} {
			pts := make([]string, len(s.vals))
			for i, v := range s.vals {
				pts[i] = strconv.FormatFloat(x(i+1), 'f', 1, 64) + "," + strconv.FormatFloat(y(v), 'f', 1, 64)
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" points="%s"/>`+"\n", s.color, s.width, strings.Join(pts, " "))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
