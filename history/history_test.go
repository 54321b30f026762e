package history

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/store"
)

var t0 = time.Unix(1_800_000_000, 0)

// want is the model's expected sample of one second.
type want struct {
	t                 int64
	allowed, rejected int64
	exhausted, cost   int64
	apps              map[string]int64 // admitted per app
}

// TestRecorderProperty drives a Recorder with random readings (counters that grow or are
// reset, clock steps of 0 to 3 s, apps coming and going) and checks the window against a model
// that knows each second's increments: at most Window samples, oldest first, one per second,
// and each sample's counts are exactly that second's increments.
func TestRecorderProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := New()
		now := t0
		var cum Totals
		appCum := map[string]int64{}
		var model []want
		steps := rapid.IntRange(1, 2500).Draw(rt, "steps")
		for i := range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "step") {
			case 0: // same second
			case 1:
				now = now.Add(time.Duration(rapid.IntRange(2, 3).Draw(rt, "gap")) * time.Second)
			default:
				now = now.Add(time.Second)
			}
			w := want{t: now.Unix(), apps: map[string]int64{}}
			if reset := rapid.IntRange(0, 30).Draw(rt, "reset") == 0 && cum.Requests[0] > 0; reset {
				v := rapid.Int64Range(0, cum.Requests[0]-1).Draw(rt, "resetTo")
				cum.Requests[0], w.allowed = v, v
			} else {
				inc := rapid.Int64Range(0, 1000).Draw(rt, "allowed")
				cum.Requests[0] += inc
				w.allowed = inc
			}
			inc := rapid.Int64Range(0, 50).Draw(rt, "exhausted")
			cum.Requests[store.ReasonAppExhausted] += inc
			w.rejected, w.exhausted = inc, inc
			inc = rapid.Int64Range(0, 5000).Draw(rt, "cost")
			cum.Cost += inc
			w.cost = inc
			rd := Reading{Totals: cum, InFlight: int64(i)}
			for _, id := range []string{"a", "b"} {
				if rapid.IntRange(0, 5).Draw(rt, "absent-"+id) == 0 {
					delete(appCum, id) // its next reading counts from zero
					continue
				}
				inc := rapid.Int64Range(0, 100).Draw(rt, "app-"+id)
				appCum[id] += inc
				w.apps[id] = inc
				var at Totals
				at.Requests[0] = appCum[id]
				rd.Apps = append(rd.Apps, AppReading{ID: id, Totals: at})
			}
			r.Record(now, rd)
			if n := len(model); n > 0 && model[n-1].t == w.t {
				m := &model[n-1]
				m.allowed, m.rejected, m.exhausted, m.cost = m.allowed+w.allowed, m.rejected+w.rejected, m.exhausted+w.exhausted, m.cost+w.cost
				for id, v := range w.apps {
					m.apps[id] += v
				}
			} else {
				model = append(model, w)
			}
		}
		newest := model[len(model)-1].t
		var inWindow []want
		for _, m := range model {
			if m.t > newest-Window {
				inWindow = append(inWindow, m)
			}
		}
		h := r.Window(Window, []string{"a", "b"})
		if len(h.Samples) > Window || len(h.Samples) != len(inWindow) {
			rt.Fatalf("%d samples, want %d (at most %d)", len(h.Samples), len(inWindow), Window)
		}
		for i, s := range h.Samples {
			m := inWindow[i]
			if i > 0 && s.T <= h.Samples[i-1].T {
				rt.Fatalf("sample %d: t %d after %d: not oldest first, one per second", i, s.T, h.Samples[i-1].T)
			}
			if s.T != m.t || s.Allowed != m.allowed || s.Rejected != m.rejected || s.Reasons["app_exhausted"] != m.exhausted || s.Cost != m.cost {
				rt.Fatalf("sample %d = %+v, want %+v", i, s, m)
			}
		}
		for _, id := range []string{"a", "b"} {
			var exp []want
			for _, m := range inWindow {
				if _, ok := m.apps[id]; ok {
					exp = append(exp, m)
				}
			}
			got := h.Apps[id]
			if len(got) != len(exp) {
				rt.Fatalf("app %s: %d samples, want %d", id, len(got), len(exp))
			}
			for i, s := range got {
				if s.T != exp[i].t || s.Allowed != exp[i].apps[id] {
					rt.Fatalf("app %s sample %d = %+v, want t %d allowed %d", id, i, s, exp[i].t, exp[i].apps[id])
				}
			}
		}
		// A shorter window is the tail of the full one.
		n := rapid.IntRange(1, Window).Draw(rt, "seconds")
		short := r.Window(n, nil)
		for _, s := range short.Samples {
			if s.T <= newest-int64(n) {
				rt.Fatalf("window %d: sample at %d, newest %d", n, s.T, newest)
			}
		}
		if tail := h.Samples[len(h.Samples)-len(short.Samples):]; !reflect.DeepEqual(tail, short.Samples) {
			rt.Fatalf("window %d is not the tail of the full window", n)
		}
	})
}

// TestRecorderAppBound: however many apps the readings carry, at most MaxApps have a series,
// while every app is idle, the first ones seen; the others have none.
func TestRecorderAppBound(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := New()
		napps := rapid.IntRange(0, 3*MaxApps).Draw(rt, "apps")
		rd := Reading{}
		for i := range napps {
			rd.Apps = append(rd.Apps, AppReading{ID: fmt.Sprintf("app%03d", i)})
		}
		for s := range rapid.IntRange(1, 5).Draw(rt, "seconds") {
			r.Record(t0.Add(time.Duration(s)*time.Second), rd)
		}
		_, latest, ok := r.Latest()
		if !ok || len(latest) != min(napps, MaxApps) {
			rt.Fatalf("latest has %d apps, want %d", len(latest), min(napps, MaxApps))
		}
		for i := range napps {
			id := fmt.Sprintf("app%03d", i)
			if _, has := latest[id]; has != (i < MaxApps) {
				rt.Fatalf("app %s (seen %d-th): has series %v", id, i, has)
			}
		}
		if got := len(r.Window(Window, nil).Apps); got != min(napps, TopApps) {
			rt.Fatalf("default window: %d apps, want %d", got, min(napps, TopApps))
		}
	})
}

// TestRecorderBusiest: without explicit apps the window has the TopApps busiest apps; named
// apps without a series are left out.
func TestRecorderBusiest(t *testing.T) {
	r := New()
	for s := range 3 {
		rd := Reading{}
		for i := range 15 {
			var tot Totals
			tot.Requests[0] = int64(i * (s + 1))                      // app i: i decisions a second
			tot.Requests[store.ReasonAppLimitExceeded] = int64(s + 1) // and one rejection
			rd.Apps = append(rd.Apps, AppReading{ID: fmt.Sprintf("app%02d", i), Totals: tot, Burst: 7})
		}
		r.Record(t0.Add(time.Duration(s)*time.Second), rd)
	}
	h := r.Window(2, nil)
	if len(h.Apps) != TopApps {
		t.Fatalf("%d apps, want %d", len(h.Apps), TopApps)
	}
	for i := range 15 {
		id := fmt.Sprintf("app%02d", i)
		if _, ok := h.Apps[id]; ok != (i >= 5) {
			t.Errorf("%s in the top %d: %v", id, TopApps, ok)
		}
	}
	want := []AppSample{
		{T: t0.Unix() + 1, Allowed: 14, Rejected: 1, Reasons: map[string]int64{"app_limit_exceeded": 1}, Burst: 7},
		{T: t0.Unix() + 2, Allowed: 14, Rejected: 1, Reasons: map[string]int64{"app_limit_exceeded": 1}, Burst: 7},
	}
	if got := h.Apps["app14"]; !reflect.DeepEqual(got, want) {
		t.Errorf("app14 = %+v, want %+v", got, want)
	}
	h = r.Window(Window, []string{"app01", "nope"})
	if len(h.Apps) != 1 || len(h.Apps["app01"]) != 3 {
		t.Errorf("named apps: %+v", h.Apps)
	}
}

// TestRecorderStaleSeries: a series without a sample for Window seconds is dropped and frees
// its place.
func TestRecorderStaleSeries(t *testing.T) {
	r := New()
	var full Reading
	for i := range MaxApps {
		full.Apps = append(full.Apps, AppReading{ID: fmt.Sprintf("old%d", i)})
	}
	r.Record(t0, full)
	r.Record(t0.Add(time.Second), Reading{Apps: []AppReading{{ID: "new"}}})
	if _, apps, _ := r.Latest(); len(apps) != 0 {
		t.Fatalf("no place for a new app while %d series are live: %v", MaxApps, apps)
	}
	r.Record(t0.Add(Window*time.Second), Reading{Apps: []AppReading{{ID: "new"}}})
	if _, apps, _ := r.Latest(); len(apps) != 1 || len(r.apps) != 1 {
		t.Fatalf("after %d s the old series are gone and new has one: %v (%d series)", Window, apps, len(r.apps))
	}
}

// TestSampleJSON: the JSON field names of the agreed shapes.
func TestSampleJSON(t *testing.T) {
	r := New()
	var tot Totals
	tot.Requests[0], tot.Requests[store.ReasonClusterExhausted], tot.Cost, tot.LocalHits = 4, 2, 9, 3
	r.Record(t0, Reading{
		Totals: tot, Usage: 0.5, Capacity: 100, Level: 1, Emergency: true, LiveInstances: 2,
		InFlight: 3, ConnectionLimit: 50, Apps: []AppReading{{
			ID: "x", Totals: tot, LocalTokens: 5, InFlight: 1,
			Limit: 10, Borrowed: 1.5, Debt: 2, Guaranteed: 10, Burst: 20,
		}},
	})
	s, apps, _ := r.Latest()
	b, _ := json.Marshal(s)
	if got, want := string(b), `{"t":1800000000,"allowed":4,"rejected":2,"reasons":{"cluster_exhausted":2},"cost":9,"usage":0.5,"capacity":100,"level":1,"emergency":true,"live_instances":2,"in_flight":3,"connection_limit":50,"local_hit_ratio":0.75}`; got != want {
		t.Errorf("sample\n got %s\nwant %s", got, want)
	}
	b, _ = json.Marshal(apps["x"])
	if got, want := string(b), `{"t":1800000000,"allowed":4,"rejected":2,"reasons":{"cluster_exhausted":2},"cost":9,"local_tokens":5,"in_flight":1,"limit":10,"borrowed":1.5,"debt":2,"guaranteed":10,"burst":20}`; got != want {
		t.Errorf("app sample\n got %s\nwant %s", got, want)
	}
	if h := New().Window(10, nil); h.Samples == nil || len(h.Samples) != 0 || h.Apps == nil {
		t.Errorf("empty recorder window: %+v (want empty, non-nil)", h)
	}
}

// TestChangedSignalsRecord: the channel from Changed closes at the next Record, not before.
func TestChangedSignalsRecord(t *testing.T) {
	r := New()
	ch := r.Changed()
	select {
	case <-ch:
		t.Fatal("closed before any Record")
	default:
	}
	r.Record(time.Unix(100, 0), Reading{})
	select {
	case <-ch:
	default:
		t.Fatal("not closed by Record")
	}
	select {
	case <-r.Changed():
		t.Fatal("the next channel is closed already")
	default:
	}
}
