package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// The history routes (docs/admin-api.md):
//
//	GET /rate_limit/history?seconds=N[&app=<id>]...   HistoryView
//	GET /rate_limit/stream                            text/event-stream of StreamEvent, one a second

// MaxStreams bounds the concurrent GET /rate_limit/stream responses of the process; one more
// is answered 503.
const MaxStreams = 32

// streamWriteTimeout bounds the write of one event: a client that stops reading is dropped.
const streamWriteTimeout = 10 * time.Second

// streams counts the open streams.
var streams atomic.Int64

// HistoryView is GET /rate_limit/history.
type HistoryView struct {
	Cluster  string                         `json:"cluster"`
	Interval int                            `json:"interval_seconds"`
	Samples  []history.Sample               `json:"samples"` // oldest first
	Apps     map[string][]history.AppSample `json:"apps"`
}

// StreamEvent is the data of one event of GET /rate_limit/stream.
type StreamEvent struct {
	Cluster string                       `json:"cluster"`
	Sample  history.Sample               `json:"sample"`
	Apps    map[string]history.AppSample `json:"apps"` // every app with a sample in that second
}

// written is returned by a view that wrote its response itself (the stream).
type written struct{}

// Read is the cluster's figures now, as the other routes show them: the input of its
// history.Recorder (the root's sampler calls it once a second). The cluster's counts are the
// sum of its configured apps' and "*"'s (with the decisions taken before there is an app); the
// active isolated tenants follow, each with its own counts.
func Read(c Cluster) history.Reading {
	lim := c.Limiter()
	cfg, ids := lim.ConfigAndIDs()
	st := lim.State()
	total := connectionView(c.Connections().ClusterStats())
	capacity, _ := lim.Capacity() // in force: a learned capacity moves, and the console draws it
	rd := history.Reading{
		Usage:           num(st.Usage),
		Capacity:        num(capacity),
		Level:           int(lim.Level()),
		Emergency:       st.Emergency,
		LiveInstances:   st.LiveInstances,
		InFlight:        total.Current,
		ConnectionLimit: total.Limit,
	}
	// Every app GET /rate_limit/apps lists, without building its views: this runs every
	// second, for every app. The cluster's counts are the configured apps' and "*"'s; the
	// isolated tenants' are part of "*" already.
	counter := c.Connections()
	stats := statsByLabel(c)
	conns := connsByApp(counter)
	read := func(id string, s limiter.AppStats, p *store.AppPolicy) history.AppReading {
		a := history.AppReading{
			ID: id, Totals: history.Totals{
				Requests: s.Requests, Cost: s.Cost, LocalHits: s.LocalHits, Leases: s.Leases, LeaseTokens: s.LeaseTokens,
			},
			LocalTokens: s.LocalTokens, InFlight: conns[id].Current, Borrowed: num(s.Borrowed), Debt: num(s.Debt),
		}
		if p != nil {
			a.Limit, a.Guaranteed, a.Burst = maxConnections(id, *p, counter), num(p.Guaranteed), num(p.Burst)
		}
		return a
	}
	isolated := lim.IsolatedStats()
	rd.Apps = make([]history.AppReading, 0, len(cfg.Apps)+1+len(isolated))
	for _, id := range ids {
		p := cfg.Apps[id]
		rd.Apps = append(rd.Apps, read(id, stats[id], &p))
	}
	rd.Apps = append(rd.Apps, read(wildcardApp, stats[wildcardApp], starPolicy(cfg)))
	for _, a := range rd.Apps {
		for i, n := range a.Requests {
			rd.Requests[i] += n
		}
		rd.Cost += a.Cost
		rd.LocalHits += a.LocalHits
		rd.Leases += a.Leases
		rd.LeaseTokens += a.LeaseTokens
	}
	for _, s := range isolated {
		if _, configured := cfg.Apps[s.Label]; !configured {
			rd.Apps = append(rd.Apps, read(s.Label, s, &cfg.Default))
		}
	}
	return rd
}

// recorder is the cluster's history, or a 404.
func recorder(c Cluster) (*history.Recorder, error) {
	if rec := c.History(); rec != nil {
		return rec, nil
	}
	return nil, apiError(http.StatusNotFound, "cluster %q keeps no history", c.ID())
}

// historyView is GET /rate_limit/history: ?seconds=N (1..900, default 900) and any number of
// ?app=<id>. An app without a series (unknown, or beyond history.MaxApps) is left out of "apps".
func historyView(c Cluster, q url.Values) (any, error) {
	seconds := history.Window
	if q.Has("seconds") {
		s := q.Get("seconds")
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > history.Window || s[0] == '+' || len(q["seconds"]) > 1 {
			return nil, apiError(http.StatusBadRequest, "seconds: must be a whole number from 1 to %d, given once, got %q",
				history.Window, strings.Join(q["seconds"], "&"))
		}
		seconds = n
	}
	for _, id := range q["app"] {
		if id != wildcardApp && !limiter.ValidAppID(id) {
			return nil, invalidAppID(id)
		}
	}
	rec, err := recorder(c)
	if err != nil {
		return nil, err
	}
	var apps []string
	if q.Has("app") {
		apps = q["app"]
	}
	h := rec.Window(seconds, apps)
	return HistoryView{Cluster: c.ID(), Interval: 1, Samples: h.Samples, Apps: h.Apps}, nil
}

// stream is GET /rate_limit/stream: an event with the newest sample at once (if there is one),
// then one for each new sample as the recorder takes it, until the client goes away or the
// config this API belongs to is unloaded. Caddy stops the admin server of a config it replaces
// or shuts down, waiting up to 10 s for open requests: ending the stream with its config lets
// a reload and a shutdown finish at once (the console's EventSource reconnects to the new
// server). Caddy's admin server has a read timeout that would end the request's context; the
// stream clears the read deadline and sets a write deadline per event instead.
func (a API) stream(w http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
	rec, err := recorder(c)
	if err != nil {
		return nil, err
	}
	if streams.Add(1) > MaxStreams {
		streams.Add(-1)
		return nil, apiError(http.StatusServiceUnavailable, "too many open streams (at most %d): try again later", MaxStreams)
	}
	defer streams.Add(-1)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // not supported by every writer (tests): then there is none
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()

	var unloaded <-chan struct{} // nil (never) for an API not provisioned by Caddy
	if a.ctx.Context != nil {
		unloaded = a.ctx.Done()
	}
	last := int64(-1)
	for {
		changed := rec.Changed() // before Latest: a sample recorded in between is not missed
		if s, apps, ok := rec.Latest(); ok && s.T != last {
			last = s.T
			b, err := json.Marshal(StreamEvent{Cluster: c.ID(), Sample: s, Apps: apps})
			if err != nil {
				return written{}, nil
			}
			_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
			if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
				return written{}, nil
			}
			if err := rc.Flush(); err != nil {
				return written{}, nil
			}
		}
		select {
		case <-r.Context().Done():
			return written{}, nil
		case <-unloaded:
			return written{}, nil
		case <-a.stop:
			return written{}, nil
		case <-changed:
		}
	}
}
