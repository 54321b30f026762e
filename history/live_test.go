package history

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// reading is the cumulative admitted counts of apps as a Reading.
func reading(cum map[string]int64) Reading {
	rd := Reading{}
	for id, n := range cum {
		var tot Totals
		tot.Requests[0] = n
		tot.Cost = 2 * n
		rd.Apps = append(rd.Apps, AppReading{ID: id, Totals: tot})
	}
	return rd
}

// TestLiveProperty: an app's live figures are exactly its increments of the last LiveWindow
// seconds up to the newest sample, and LiveAll lists exactly the apps with one.
func TestLiveProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := New()
		ids := []string{"a", "b", "c"}
		cum := map[string]int64{}
		incs := map[string]map[int64]int64{} // app → second → admitted
		now := t0
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 4).Draw(rt, "gap")) * time.Second)
			for _, id := range ids {
				n := rapid.Int64Range(0, 3).Draw(rt, "inc-"+id)
				if rapid.IntRange(0, 2).Draw(rt, "idle-"+id) == 0 {
					n = 0
				}
				cum[id] += n
				if incs[id] == nil {
					incs[id] = map[int64]int64{}
				}
				incs[id][now.Unix()] += n
			}
			r.Record(now, reading(cum))
		}
		all := r.LiveAll()
		for _, id := range ids {
			var want int64
			for s, n := range incs[id] {
				if s > now.Unix()-LiveWindow {
					want += n
				}
			}
			got := r.Live(id)
			if got.Allowed != want || got.Cost != 2*want || got.Rejected != 0 {
				rt.Fatalf("%s: live %+v, want %d admitted (cost %d)", id, got, want, 2*want)
			}
			if _, listed := all[id]; listed != (want > 0) {
				rt.Fatalf("%s: listed %v with %d admitted in the window", id, listed, want)
			}
		}
	})
}

// TestSeriesGoToTheBusiest: with more apps than places, the first apps seen take every place
// while all are idle; once others are busy, the busiest have series and are the window's top
// apps, and a series kept through the change has no gap.
func TestSeriesGoToTheBusiest(t *testing.T) {
	r := New()
	cum := map[string]int64{}
	for i := range 4 * MaxApps {
		cum[fmt.Sprintf("app%04d", i)] = 0
	}
	now := t0
	r.Record(now, reading(cum))
	busy := map[string]bool{}
	for i := range TopApps {
		busy[fmt.Sprintf("app%04d", 3*MaxApps+i)] = true
	}
	for s := 1; s <= 3; s++ {
		now = now.Add(time.Second)
		for id := range busy {
			cum[id] += 10
		}
		r.Record(now, reading(cum))
	}
	if len(r.apps) != MaxApps {
		t.Fatalf("%d series, want %d", len(r.apps), MaxApps)
	}
	h := r.Window(60, nil)
	for id := range busy {
		if got := h.Apps[id]; len(got) == 0 || got[len(got)-1].Allowed != 10 {
			t.Errorf("busy %s: series %+v, want one ending at 10 admitted", id, got)
		}
	}
	if len(h.Apps) != TopApps {
		t.Errorf("%d top apps, want %d", len(h.Apps), TopApps)
	}
}

// TestSeriesKeepTheirPlace: an app holding a series keeps it against an app only slightly
// busier, so that apps of about the same traffic do not trade places every second; one busier
// by more than a quarter takes it.
func TestSeriesKeepTheirPlace(t *testing.T) {
	r := New()
	cum := map[string]int64{}
	for i := range MaxApps {
		cum[fmt.Sprintf("held%02d", i)] = 0
	}
	now := t0
	r.Record(now, reading(cum)) // every place taken
	cum["close"], cum["far"] = 0, 0
	for range 3 {
		now = now.Add(time.Second)
		for id := range cum {
			cum[id] += 10
		}
		cum["close"] += 1 // 11 a second: not a quarter more
		r.Record(now, reading(cum))
	}
	if _, ok := r.apps["close"]; ok {
		t.Error("an app 10% busier took a place")
	}
	now = now.Add(time.Second)
	for id := range cum {
		cum[id] += 10
	}
	cum["far"] += 30
	r.Record(now, reading(cum))
	if _, ok := r.apps["far"]; !ok || len(r.apps) != MaxApps {
		t.Errorf("an app far busier has no place (%d series)", len(r.apps))
	}
}

// TestWantedAppGetsASeries: an app asked for by name (its page is open) gets a series at the
// next reading even when idle and every place is held by busier apps, and keeps it for
// WantedFor seconds.
func TestWantedAppGetsASeries(t *testing.T) {
	r := New()
	cum := map[string]int64{"quiet": 0}
	for i := range MaxApps {
		cum[fmt.Sprintf("busy%02d", i)] = 0
	}
	now := t0
	step := func() {
		now = now.Add(time.Second)
		for id := range cum {
			if id != "quiet" {
				cum[id] += 100
			}
		}
		cum["quiet"]++
		r.Record(now, reading(cum))
	}
	step()
	if _, ok := r.apps["quiet"]; ok {
		t.Fatal("quiet has a place before it was asked for")
	}
	r.Window(60, []string{"quiet"})
	step()
	if got := r.Window(60, []string{"quiet"}).Apps["quiet"]; len(got) != 1 || got[0].Allowed != 1 {
		t.Fatalf("quiet after it was asked for: %+v", got)
	}
	for range WantedFor - 2 {
		step()
		if _, ok := r.apps["quiet"]; !ok {
			t.Fatalf("quiet lost its place %d s after it was asked for", now.Unix()-t0.Unix())
		}
	}
}
