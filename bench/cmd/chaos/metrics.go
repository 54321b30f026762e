package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// gauges are what the harness reads from a gateway's admin /metrics.
type gauges struct {
	goroutines, heapInuse float64
	level                 float64 // caddy_rate_limit_degradation_level (the highest of the clusters)
	// slowCalls counts the Store calls slower than the mild threshold so far (from the
	// caddy_rate_limit_store_latency_seconds histogram).
	slowCalls float64
}

var scrapeClient = &http.Client{Timeout: 2 * time.Second}

func scrape(g *gateway) (gauges, error) {
	resp, err := scrapeClient.Get(g.admin() + "/metrics")
	if err != nil {
		return gauges{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return gauges{}, fmt.Errorf("%s /metrics: %s", g.name, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the gauges from Prometheus' text format. A missing level series is an
// error: after a refused reload Caddy serves no caddy_* series, and the level must not read as 0.
func parseMetrics(r io.Reader) (gauges, error) {
	var m gauges
	seenLevel := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := cutSample(line)
		if !ok {
			continue
		}
		switch {
		case name == "go_goroutines":
			m.goroutines = value
		case name == "go_memstats_heap_inuse_bytes":
			m.heapInuse = value
		case strings.HasPrefix(name, "caddy_rate_limit_store_latency_seconds_count"):
			m.slowCalls += value
		case strings.HasPrefix(name, "caddy_rate_limit_store_latency_seconds_bucket") && strings.Contains(name, `le="0.01"`):
			m.slowCalls -= value
		case strings.HasPrefix(name, "caddy_rate_limit_degradation_level"):
			seenLevel = true
			m.level = max(m.level, value)
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if !seenLevel {
		return m, fmt.Errorf("no caddy_rate_limit_degradation_level series")
	}
	return m, nil
}

// cutSample splits "name{labels} value" into the name (labels kept) and the value.
func cutSample(line string) (string, float64, bool) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return "", 0, false
	}
	return line[:i], v, true
}

// sample is one scrape of one gateway process.
type sample struct {
	at time.Duration
	gauges
}

// sampler scrapes every gateway's gauges periodically, one series per process.
type sampler struct {
	mu     sync.Mutex
	series map[string][]sample // "<gateway> #<process>" → samples
}

func (s *sampler) scrapeAll(c *chaos) {
	for _, g := range c.gws {
		if !g.up.Load() {
			continue
		}
		key := fmt.Sprintf("%s #%d", g.name, len(g.logFiles())-1)
		m, err := scrape(g)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.series[key] = append(s.series[key], sample{at: c.since(), gauges: m})
		s.mu.Unlock()
	}
}

// slope is the least-squares slope of ys over xs (per unit of x), 0 with fewer than 2 points.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if len(xs) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}
