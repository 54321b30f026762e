package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The latency levels' thresholds and the margin below which a level must be left, and how
// long it may take: the level goes down once the average has stayed below 70 % of the
// threshold and the threshold was last reached 3 s ago, at the next call (reports come at
// least once a second at every level); one poll interval more for the harness to see it
// (docs/design.md, "Degradation").
const (
	mildThreshold        = 0.010
	significantThreshold = 0.100
	leaveMargin          = 0.7
	levelFollowBound     = 5 * time.Second
	levelPoll            = 500 * time.Millisecond
)

// instanceView is what GET /rate_limit/ says of the level and the latency average.
type instanceView struct {
	Level struct {
		Number int `json:"number"`
	} `json:"degradation_level"`
	StoreLatency float64 `json:"store_latency_seconds"`
}

// levelWatch polls every gateway's level and latency average and measures the longest time a
// latency level (mild, significant) stayed while the average was below the margin of its
// threshold and no Store call was slower than the mild threshold (such a call may lift the
// average back to a threshold between two polls, which restarts the hold): the level following
// the Store's latency in time.
type levelWatch struct {
	client *http.Client
	mu     sync.Mutex
	since  map[*gateway]time.Time // when the current stale stretch began
	slow   map[*gateway]float64   // the gateway's count of slow Store calls at the last poll
	worst  time.Duration
	where  string
	polls  int
}

func (w *levelWatch) run(ctx context.Context, c *chaos) {
	t := time.NewTicker(levelPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, g := range c.gws {
			w.poll(c, g)
		}
	}
}

func (w *levelWatch) poll(c *chaos, g *gateway) {
	v, err := w.view(g)
	m, merr := scrape(g)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil || merr != nil || !g.up.Load() {
		delete(w.since, g) // stopped, or a new process: a new stretch
		delete(w.slow, g)
		return
	}
	w.polls++
	prev, known := w.slow[g]
	w.slow[g] = m.slowCalls
	stale := (v.Level.Number == 1 && v.StoreLatency < leaveMargin*mildThreshold) ||
		(v.Level.Number == 2 && v.StoreLatency < leaveMargin*significantThreshold)
	if !stale || !known || m.slowCalls != prev {
		delete(w.since, g)
		return
	}
	now := time.Now()
	began, ok := w.since[g]
	if !ok {
		w.since[g] = now
		return
	}
	if d := now.Sub(began); d > w.worst {
		w.worst = d
		w.where = fmt.Sprintf("%s at level %d with an average of %.1f ms, %v into the run", g.name, v.Level.Number,
			1000*v.StoreLatency, c.since().Round(time.Second))
	}
}

func (w *levelWatch) view(g *gateway) (instanceView, error) {
	var v instanceView
	resp, err := w.client.Get(g.admin() + "/rate_limit/")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s", resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

func (w *levelWatch) line() line {
	w.mu.Lock()
	defer w.mu.Unlock()
	worst := fmt.Sprintf("%v", w.worst.Round(100*time.Millisecond))
	if w.where != "" {
		worst += " (" + w.where + ")"
	}
	return line{
		name:  "the latency level follows the latency average (a level kept while the average is below 70 % of its threshold and no call slower than 10 ms came)",
		worst: worst + fmt.Sprintf("; %d polls", w.polls),
		bound: fmt.Sprintf("≤ %v", levelFollowBound),
		ok:    w.worst <= levelFollowBound,
	}
}
