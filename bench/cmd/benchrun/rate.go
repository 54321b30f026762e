package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

// fixedRate loads http://127.0.0.1:port/ at rate requests per second for d, open loop: request i
// is due at start + i/rate whatever happened to the earlier ones, and its latency counts from
// when it was due, so a stall shows in the percentiles instead of slowing the load down (no
// coordinated omission). Unlike wrk's closed loop at full speed, the server is far from
// saturated, so the latencies are the handler's and the network stack's, not queueing.
func fixedRate(port, rate int, d time.Duration, log *os.File) (wrkResult, error) {
	n := int(float64(rate) * d.Seconds())
	if rate <= 0 || n <= 0 {
		return wrkResult{}, fmt.Errorf("fixed rate %d/s for %v: nothing to send", rate, d)
	}
	const workers = 64
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true},
	}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	interval := time.Second / time.Duration(rate)
	start := time.Now().Add(50 * time.Millisecond)
	due := make(chan time.Time, workers)
	lat := make([][]time.Duration, workers)
	var statusErrs, socketErrs [workers]int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range due {
				time.Sleep(time.Until(at))
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Host = appHost
				resp, err := client.Do(req)
				if err != nil {
					socketErrs[w]++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[w] = append(lat[w], time.Since(at))
				if resp.StatusCode >= 400 {
					statusErrs[w]++
				}
			}
		}()
	}
	for i := range n {
		due <- start.Add(time.Duration(i) * interval)
	}
	close(due)
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	r := wrkResult{Duration: elapsed}
	for w := range workers {
		all = append(all, lat[w]...)
		r.StatusErrors += statusErrs[w]
		r.SocketErrors += socketErrs[w]
	}
	r.Requests = int64(len(all)) + r.SocketErrors
	if len(all) == 0 {
		return r, fmt.Errorf("fixed rate: no answer")
	}
	slices.Sort(all)
	r.P50, r.P99 = all[len(all)/2], all[len(all)*99/100]
	fmt.Fprintf(log, "fixed rate %d/s for %v: %d requests, p50 %v, p99 %v, status errors %d, socket errors %d\n",
		rate, d, r.Requests, r.P50, r.P99, r.StatusErrors, r.SocketErrors)
	return r, nil
}
