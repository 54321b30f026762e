package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// historySample is what the test reads of a Sample / AppSample.
type historySample struct {
	T        int64            `json:"t"`
	Allowed  int64            `json:"allowed"`
	Rejected int64            `json:"rejected"`
	Reasons  map[string]int64 `json:"reasons"`
	Burst    float64          `json:"burst"`
}

// TestHistoryAndStream: in a real Caddy, the sampler records the traffic's counts per second:
// GET /rate_limit/history has them in the cluster's samples and alpha's series, and
// GET /rate_limit/stream sends snapshot events at once and then every second.
func TestHistoryAndStream(t *testing.T) {
	g := startGateway(t, "history", strings.Replace(adminSite, "e2e-admin", "e2e-history", 1))
	for i := 0; i < 5; i++ { // alpha: 3 admitted, 2 rejected (burst 3, almost no refill)
		g.send("GET", "/bucket/key", "alpha", "")
	}

	type view struct {
		Cluster  string                     `json:"cluster"`
		Interval int                        `json:"interval_seconds"`
		Samples  []historySample            `json:"samples"`
		Apps     map[string][]historySample `json:"apps"`
	}
	sum := func(ss []historySample) (allowed, rejected, exhausted int64) {
		for _, s := range ss {
			allowed, rejected, exhausted = allowed+s.Allowed, rejected+s.Rejected, exhausted+s.Reasons["app_exhausted"]
		}
		return
	}
	var v view
	deadline := time.Now().Add(10 * time.Second)
	for { // the sampler records once a second: wait for the second that has the traffic
		v = view{}
		if status, _, body := g.adminJSON("GET", "/rate_limit/history?seconds=900", &v); status != 200 {
			t.Fatalf("history: %d %s", status, body)
		}
		if a, r, _ := sum(v.Apps["alpha"]); a == 3 && r == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history without alpha's 3 admitted and 2 rejected within 10 s: %+v", v)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if a, r, e := sum(v.Samples); v.Cluster != "e2e-history" || v.Interval != 1 || a != 3 || r != 2 || e != 2 {
		t.Errorf("cluster samples: %d admitted, %d rejected (%d app_exhausted), want 3, 2, 2: %+v", a, r, e, v)
	}
	if alpha := v.Apps["alpha"]; alpha[len(alpha)-1].Burst != 3 {
		t.Errorf("alpha's series %+v, want burst 3", alpha)
	}
	if status, _, body := g.adminJSON("GET", "/rate_limit/history?seconds=0", nil); status != 400 || !strings.Contains(body, "seconds") {
		t.Errorf("seconds=0: %d %s", status, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", g.admin+"/rate_limit/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	var last int64
	for i := 0; i < 3; i++ {
		var name, data string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			line = strings.TrimSuffix(line, "\n")
			if line == "" {
				break
			}
			if n, ok := strings.CutPrefix(line, "event: "); ok {
				name = n
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = d
			}
		}
		var ev struct {
			Cluster string                   `json:"cluster"`
			Sample  historySample            `json:"sample"`
			Apps    map[string]historySample `json:"apps"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || name != "snapshot" {
			t.Fatalf("event %d: %q %q: %v", i, name, data, err)
		}
		if ev.Cluster != "e2e-history" || ev.Sample.T <= last || ev.Apps["alpha"].Burst != 3 {
			t.Fatalf("event %d: %+v (previous t %d)", i, ev, last)
		}
		last = ev.Sample.T
	}
}

// openStream opens GET /rate_limit/stream on g and reads its first event; the returned channel
// is closed when the server ends the stream.
func openStream(t *testing.T, g *gateway) (ended chan struct{}) {
	t.Helper()
	return openStreamAt(t, g.admin+"/rate_limit/stream")
}

// openStreamAt is openStream for the stream at url (a console served on a site).
func openStreamAt(t *testing.T, url string) (ended chan struct{}) {
	t.Helper()
	resp, err := http.Get(url) //nolint:bodyclose // closed by the goroutine that reads it to its end
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "event: ") {
		resp.Body.Close()
		t.Fatalf("first line of the stream %q: %v", line, err)
	}
	ended = make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, br)
	}()
	return ended
}

// TestOpenStreamDoesNotHoldReloadOrShutdown: with a console's stream open, a reload stops the
// old admin server at once (no ERROR about its 10 s timeout) and SIGTERM ends Caddy at once with
// exit code 0, as an operator reloading or restarting a gateway with a console open expects.
func TestOpenStreamDoesNotHoldReloadOrShutdown(t *testing.T) {
	site := strings.Replace(adminSite, "e2e-admin", "e2e-stream-stop", 1)
	g := startGateway(t, "stream-stop", site)

	ended := openStream(t, g)
	start := time.Now()
	g.reload(site + "\n\theader X-Reloaded yes")
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		t.Fatal("the stream was still open 2 s after the reload: the old admin server waits for it")
	}
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(strings.Join(logLines(t, g), "\n"), "stopped previous server") {
		if time.Now().After(deadline) {
			t.Fatalf("the old admin server had not stopped %v after the reload", time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, line := range logLines(t, g) {
		if strings.Contains(line, `"level":"error"`) {
			t.Errorf("ERROR logged across the reload: %s", line)
		}
	}

	ended = openStream(t, g) // on the new admin server
	start = time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.exited:
	case <-time.After(2 * time.Second):
		t.Fatal("Caddy had not exited 2 s after SIGTERM with a stream open")
	}
	took := time.Since(start)
	<-ended
	if code := g.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0 (%v)", code, took)
	}
	for _, line := range logLines(t, g) {
		if strings.Contains(line, "unclean shutdown") || strings.Contains(line, "failed to stop") {
			t.Errorf("shutdown: %s", line)
		}
	}
}
