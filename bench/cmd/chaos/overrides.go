package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// overrideApp is the app whose policy the operator keeps changing; its Caddyfile guaranteed
// rate is baseGuaranteed, and every override keeps it far above its offered rate.
const (
	overrideApp    = "a3"
	baseGuaranteed = 60
)

// change is one override change and how long every gateway took to enforce it.
type change struct {
	at        time.Duration // since the run's start
	via       string
	op        string        // PUT guaranteed=N | DELETE
	want      float64       // the guaranteed rate every gateway must then show
	converged time.Duration // until the last gateway showed it
	written   time.Duration // since the run's start, when a gateway took it
	// since lists, per gateway, when it was seen up again after a stop (started) and when it
	// first showed the change.
	since   []seen
	late    []string // gateways that did not show it within the wait
	refused int      // answers other than 200/204 before a gateway took the change
}

// seen is a gateway's step in taking a change.
type seen struct {
	gw      string
	at      time.Duration
	started bool // seen up again after a stop (else: showed the change)
}

// overrides changes the override of overrideApp every interval on a random gateway, then
// reads the app on every gateway up until each shows the change.
type overrides struct {
	c        *chaos
	every    time.Duration
	rng      *rand.Rand
	client   *http.Client
	mu       sync.Mutex
	changes  []change
	reverted []revert // gateways found enforcing something else than the last change
}

func (o *overrides) run(ctx context.Context) {
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ch := o.change(ctx)
		if ctx.Err() != nil {
			return // the run ended during the change: it was not given its time
		}
		o.mu.Lock()
		o.changes = append(o.changes, ch)
		o.mu.Unlock()
	}
}

// verifyLast reads the app on every gateway up and records the gateways that no longer
// enforce the last change every gateway had taken: an acknowledged change must stay in force
// until the next one (a Store that loses it writes it back).
func (o *overrides) verifyLast() {
	o.mu.Lock()
	var last *change
	for i := len(o.changes) - 1; i >= 0; i-- {
		if len(o.changes[i].late) == 0 {
			last = &o.changes[i]
			break
		}
	}
	o.mu.Unlock()
	if last == nil {
		return
	}
	for _, gw := range o.c.gws {
		if !gw.up.Load() {
			continue
		}
		v, err := o.guaranteed(gw)
		if err != nil || v == last.want {
			continue
		}
		// A gateway that started while the Store could not answer runs on its config until
		// it can read the overrides: how long it takes is judged against the faults.
		rv := revert{gw: gw.name, from: o.c.since(), desc: fmt.Sprintf("%s showed guaranteed %g at %v, after %s at %v",
			gw.name, v, o.c.since().Round(time.Second), last.op, last.at.Round(time.Second))}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if v, err := o.guaranteed(gw); err == nil && v == last.want {
				rv.back, rv.to = true, o.c.since()
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		o.mu.Lock()
		o.reverted = append(o.reverted, rv)
		o.mu.Unlock()
	}
}

// revert is a gateway found enforcing something else than the last change it had shown.
type revert struct {
	gw       string
	from, to time.Duration // found; back to the change (if back)
	back     bool
	desc     string
}

func (o *overrides) change(ctx context.Context) change {
	o.verifyLast()
	g := []float64{80, 100, 120}[o.rng.IntN(3)]
	ch := change{at: o.c.since(), want: g, op: fmt.Sprintf("PUT guaranteed=%g", g)}
	method, body := http.MethodPut, fmt.Sprintf(`{"guaranteed":%g,"burst":%g}`, g, 2*g)
	if o.rng.IntN(3) == 0 {
		method, body, ch.want, ch.op = http.MethodDelete, "", baseGuaranteed, "DELETE"
	}
	begin := time.Now()
	// A write the Store cannot take (the gateway is cut from Redis, a failover) is refused;
	// the operator tries another gateway until one takes it.
	for i := o.rng.IntN(len(o.c.gws)); ; i++ {
		if ctx.Err() != nil || time.Since(begin) > 60*time.Second {
			ch.late = append(ch.late, "no gateway took the change")
			return ch
		}
		gw := o.c.gws[i%len(o.c.gws)]
		if !gw.up.Load() {
			continue
		}
		req, _ := http.NewRequest(method, gw.admin()+"/rate_limit/apps/"+overrideApp, bytes.NewBufferString(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := o.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent ||
				(method == http.MethodDelete && resp.StatusCode == http.StatusNotFound) {
				ch.via = gw.name
				break
			}
		}
		ch.refused++
		time.Sleep(200 * time.Millisecond)
	}
	start := time.Now()
	ch.written = o.c.since()
	pending := map[*gateway]bool{}
	for _, gw := range o.c.gws {
		pending[gw] = true
	}
	downSeen := map[*gateway]bool{}
	for len(pending) > 0 && time.Since(start) < 60*time.Second && ctx.Err() == nil {
		for gw := range pending {
			if !gw.up.Load() {
				downSeen[gw] = true // it reads the overrides when it starts: timed from then
				continue
			}
			if downSeen[gw] {
				delete(downSeen, gw)
				ch.since = append(ch.since, seen{gw: gw.name, at: o.c.since(), started: true})
			}
			if v, err := o.guaranteed(gw); err == nil && v == ch.want {
				delete(pending, gw)
				ch.since = append(ch.since, seen{gw: gw.name, at: o.c.since()})
			}
		}
		if len(pending) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	ch.converged = time.Since(start)
	for gw := range pending {
		ch.late = append(ch.late, gw.name)
	}
	return ch
}

// guaranteed is the app's effective guaranteed rate on gw.
func (o *overrides) guaranteed(gw *gateway) (float64, error) {
	resp, err := o.client.Get(gw.admin() + "/rate_limit/apps/" + overrideApp)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s", resp.Status)
	}
	var app struct {
		Policy struct {
			Guaranteed float64 `json:"guaranteed"`
		} `json:"policy"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&app); err != nil {
		return 0, err
	}
	return app.Policy.Guaranteed, nil
}
