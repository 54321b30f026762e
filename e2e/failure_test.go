package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// phaseTally counts the answers of one phase of TestRedisFailure.
type phaseTally struct {
	ok, limited, bad atomic.Int64
}

func (p *phaseTally) total() int64 { return p.ok.Load() + p.limited.Load() + p.bad.Load() }

// TestRedisFailure is issue 3, item 8 with the real Caddy: under a bounded load the
// redis-server is killed and started again. With on_redis_failure local the gateway never
// answers 5xx (429s of the rescue bucket are fine) and never hangs (a 2 s client timeout is the
// safety net: an error counts as a failure), and once Redis is back the degradation level on the
// admin /metrics returns to 0. A second cluster with on_redis_failure closed answers 503
// redis_unavailable while Redis is down, and 200 again after.
func TestRedisFailure(t *testing.T) {
	requireCaddy(t)
	const (
		workers           = 2
		maxTotal          = 200000 // bound on the requests of the whole load
		outage            = 1500 * time.Millisecond
		guaranteed, burst = 200.0, 400.0
		capacity          = 800.0 // the outage admits more than a second of it
	)
	addr, srv := redistest.Standalone(t)
	block := func(cluster, mode string) string {
		return fmt.Sprintf(`rate_limit {
			cluster %s
			key {http.request.header.X-App-Id}
			capacity %g
			app svc {
				guaranteed %g
				burst %g
			}
			redis {
				address %s
				key_prefix e2e-fail
			}
			on_redis_failure %s
		}`, cluster, capacity, guaranteed, burst, addr, mode)
	}
	site := fmt.Sprintf(`	route /local/* {
		%s
		respond "ok" 200
	}
	route /closed/* {
		%s
		respond "ok" 200
	}`, block("rescue", "local"), block("shut", "closed"))
	g := startGateway(t, "g", site)
	client := newClient(t, 2*time.Second, 2*workers)

	// Both clusters work with Redis up.
	for _, path := range []string{"/local/b/o", "/closed/b/o"} {
		resp, body, err := get(client, g.base, path, "svc")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s with Redis up: %v %v %q", path, err, resp, body)
		}
	}

	// The load: phase is switched by the test; every answer is counted in the current phase.
	phases := []string{"before", "down", "after"}
	tallies := map[string]*phaseTally{}
	for _, p := range phases {
		tallies[p] = new(phaseTally)
	}
	var phase atomic.Value
	phase.Store("before")
	var firstBad atomic.Value
	var longest atomic.Int64
	var sentTotal atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loadDeadline := time.Now().Add(45 * time.Second) // bound; the test stops the load long before
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sentTotal.Add(1) <= maxTotal && time.Now().Before(loadDeadline) {
				select {
				case <-stop:
					return
				default:
				}
				p := tallies[phase.Load().(string)]
				t0 := time.Now()
				resp, body, err := get(client, g.base, "/local/bucket/object", "svc")
				if d := int64(time.Since(t0)); d > longest.Load() {
					longest.Store(d) // racy max, for the log only
				}
				switch {
				case err != nil:
					p.bad.Add(1)
					firstBad.CompareAndSwap(nil, err.Error())
				case resp.StatusCode == http.StatusOK:
					p.ok.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests:
					p.limited.Add(1)
				default:
					p.bad.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("status %d body %q", resp.StatusCode, body))
				}
			}
		}()
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopLoad()
	awaitAnswers := func(p string, n int64) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("%d answers in phase %s", n, p), 20*time.Second,
			func() bool { return tallies[p].total() >= n })
	}

	awaitAnswers("before", 300)
	// 10 s: a slow first call (the scripts' loading on a busy machine) may set a latency level,
	// which is left within about 5 s of a fast Store (docs/operations.md, "Degradation levels").
	g.waitMetric(10*time.Second, func(v float64) bool { return v == 0 }, "caddy_rate_limit_degradation_level", `cluster="rescue"`)

	// Redis dies. The gateway notices (level 3, fail_open) and keeps answering.
	phase.Store("down")
	srv.Stop()
	downAt := time.Now()
	g.waitMetric(10*time.Second, func(v float64) bool { return v == 3 }, "caddy_rate_limit_degradation_level", `cluster="rescue"`)
	t.Logf("degradation level 3 (fail_open) %.2fs after Redis was killed", time.Since(downAt).Seconds())

	// on_redis_failure closed: 503 redis_unavailable once its local tokens are spent.
	var closed503 int
	for i := 0; i < 5000 && closed503 == 0; i++ {
		resp, body, err := get(client, g.base, "/closed/bucket/object", "svc")
		if err != nil {
			t.Fatalf("closed cluster while Redis is down: %v", err)
		}
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusServiceUnavailable:
			closed503++
			if r, err := parseRejection(resp, body); err != nil || r.Reason != "redis_unavailable" {
				t.Errorf("closed cluster while Redis is down: 503 %+v %v, want reason redis_unavailable", r, err)
			}
		default:
			t.Fatalf("closed cluster while Redis is down: status %d body %q, want 200 (local tokens) or 503", resp.StatusCode, body)
		}
	}
	if closed503 == 0 {
		t.Errorf("closed cluster: no 503 redis_unavailable in 5000 requests while Redis is down")
	}

	// The load keeps running against the dead Redis for at least outage, long enough for the
	// 1 s probe to fail at least once (a load duration, not a synchronisation).
	awaitAnswers("down", 500)
	waitUntil(t, "the outage to last "+outage.String(), outage+time.Second,
		func() bool { return time.Since(downAt) >= outage })

	// Redis comes back (empty: no persistence). The level returns to normal.
	phase.Store("after")
	srv.Start()
	upAt := time.Now()
	g.waitMetric(15*time.Second, func(v float64) bool { return v == 0 }, "caddy_rate_limit_degradation_level", `cluster="rescue"`)
	t.Logf("degradation level back to 0 %.2fs after Redis was started again (down for %.2fs)",
		time.Since(upAt).Seconds(), upAt.Sub(downAt).Seconds())
	// The cost admitted during the outage is not sent to L1 as one interval's usage: that put
	// the cluster into its automatic emergency after every outage. Absence can only be watched
	// for a while: ten report intervals.
	for watch := time.Now().Add(time.Second); time.Now().Before(watch); time.Sleep(50 * time.Millisecond) {
		if v, _, _ := g.metric("caddy_rate_limit_emergency_mode", `cluster="rescue"`); v != 0 {
			usage, _, _ := g.metric("caddy_rate_limit_cluster_usage_ratio", `cluster="rescue"`)
			t.Fatalf("automatic emergency after the outage (usage %.2f)", usage)
		}
	}
	awaitAnswers("after", 300)
	waitUntil(t, "an admitted request after the recovery", 10*time.Second,
		func() bool { return tallies["after"].ok.Load() > 0 })
	stopLoad()

	// The closed cluster admits again.
	waitUntil(t, "the closed cluster to admit again", 10*time.Second, func() bool {
		resp, _, err := get(client, g.base, "/closed/bucket/object", "svc")
		return err == nil && resp.StatusCode == http.StatusOK
	})

	for _, p := range phases {
		tl := tallies[p]
		t.Logf("phase %-6s: %6d answers: %6d 200, %6d 429, %d failures (5xx or error)", p, tl.total(),
			tl.ok.Load(), tl.limited.Load(), tl.bad.Load())
		if n := tl.bad.Load(); n > 0 {
			t.Errorf("phase %s: %d requests failed (5xx or no answer within 2 s); first: %v", p, n, firstBad.Load())
		}
	}
	t.Logf("longest request: %v (client timeout 2 s)", time.Duration(longest.Load()))
	// The rescue limit holds: while Redis was down the gateway admitted at most the tokens it
	// held locally (a lease is at most burst / 2 with one instance), the rescue bucket's burst,
	// and its rate (guaranteed / live instances) over the outage.
	down := upAt.Sub(downAt).Seconds()
	rescueMax := burst/2 + burst + guaranteed*down
	t.Logf("admitted while Redis was down: %d in %.2fs, rescue bound local + burst + rate × T = %.0f",
		tallies["down"].ok.Load(), down, rescueMax)
	if n := tallies["down"].ok.Load(); n == 0 {
		t.Errorf("nothing admitted while Redis was down: the rescue bucket (on_redis_failure local) admits none")
	} else if float64(n) > rescueMax {
		t.Errorf("admitted %d while Redis was down, over the rescue bound %.0f", n, rescueMax)
	}
}

// TestStopWithFrozenRedis: a gateway stopped while Redis answers nothing (SIGSTOP) gives up on
// returning its tokens after the first failed call and says so once. Trying each app holding
// tokens in turn, a second each, would hold a `caddy stop` for 30 s with the test's 30 apps and
// end in an ERROR listing 30 timeouts.
func TestStopWithFrozenRedis(t *testing.T) {
	const apps = 30
	addr, srv := redistest.Standalone(t)
	g := startGateway(t, "frozen-stop", fmt.Sprintf(`	rate_limit {
		cluster frozen
		key {http.request.header.X-App-Id}
		unknown_app isolated
		app * {
			guaranteed 100
			burst 100
		}
		redis {
			address %s
			key_prefix e2e-frozen
		}
	}
	respond "ok" 200`, addr))
	for i := range apps {
		if r := g.send(http.MethodGet, "/", fmt.Sprintf("app%d", i), ""); r.status != http.StatusOK {
			t.Fatalf("app%d: %d", i, r.status)
		}
	}
	srv.Pause()
	defer srv.Resume()
	g.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-g.exited:
	case <-time.After(2 * time.Minute):
		g.kill()
		t.Fatal("the gateway did not exit within 2 minutes of SIGINT")
	}
	var closing []string
	for _, line := range logLines(t, g) {
		if strings.Contains(line, "closing") && strings.Contains(line, "rate_limit") {
			closing = append(closing, line)
		}
	}
	if len(closing) != 1 || !strings.Contains(closing[0], `"level":"warn"`) ||
		!strings.Contains(closing[0], fmt.Sprintf("of %d apps were not returned", apps)) ||
		strings.Count(closing[0], "timeout") > 1 {
		g.dumpLog()
		t.Fatalf("want one WARN saying the %d apps' tokens were not returned, with the Store's error once; got %q", apps, closing)
	}
}
