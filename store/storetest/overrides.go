package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// The admin overrides (Store.Overrides, SetOverride, Watch, ClusterState.ConfigVersion):
// opaque entries under a version that changes with every change, compare-and-set on that
// version, and a notification after a change.

func overrideCases() []testCase {
	return []testCase{
		{"OverridesEmpty", overridesEmpty},
		{"OverridesSetAndRemove", overridesSetAndRemove},
		{"OverridesVersionConflict", overridesVersionConflict},
		{"OverridesVersionInReport", overridesVersionInReport},
		{"OverridesInvalidChange", overridesInvalidChange},
		{"OverridesWatch", overridesWatch},
	}
}

func (e *env) overrides() store.Overrides {
	e.t.Helper()
	o, err := e.s.Overrides(context.Background(), e.cluster.ID)
	if err != nil {
		e.t.Fatalf("Overrides: %v", err)
	}
	return o
}

func (e *env) setOverride(key string, value []byte, ifVersion uint64) uint64 {
	e.t.Helper()
	v, err := e.s.SetOverride(context.Background(), e.cluster.ID, store.OverrideChange{Key: key, Value: value, IfVersion: ifVersion})
	if err != nil {
		e.t.Fatalf("SetOverride(%q, %q, if %d): %v", key, value, ifVersion, err)
	}
	return v
}

func overridesEmpty(e *env) {
	o := e.overrides()
	if o.Version != 0 || len(o.Entries) != 0 {
		e.t.Fatalf("a cluster without overrides: got %+v, want version 0 and no entries", o)
	}
}

func overridesSetAndRemove(e *env) {
	v1 := e.setOverride("app:a", []byte(`{"guaranteed":5}`), 0)
	// The version is max(old + 1, now in µs): the suite's clock.
	if want := uint64(e.clk.Now().UnixMicro()); v1 != want {
		e.t.Fatalf("first version = %d, want now in µs %d", v1, want)
	}
	// Later changes within the same µs still move the version.
	v2 := e.setOverride(store.OverrideClusterKey, []byte(`{"capacity":100}`), v1)
	if v2 != v1+1 {
		e.t.Fatalf("second version = %d, want %d", v2, v1+1)
	}
	o := e.overrides()
	if o.Version != v2 || len(o.Entries) != 2 || string(o.Entries["app:a"]) != `{"guaranteed":5}` ||
		string(o.Entries["cluster"]) != `{"capacity":100}` {
		e.t.Fatalf("after two sets: %+v", o)
	}
	e.clk.Advance(time.Second)
	v3 := e.setOverride("app:a", nil, v2)
	if want := uint64(e.clk.Now().UnixMicro()); v3 != want {
		e.t.Fatalf("version after a second = %d, want %d", v3, want)
	}
	o = e.overrides()
	if o.Version != v3 || len(o.Entries) != 1 || o.Entries["app:a"] != nil {
		e.t.Fatalf("after removing app:a: %+v", o)
	}
	// Removing an absent entry is a change too (the version moves), so the caller never needs
	// to know whether it was there.
	if v4 := e.setOverride("app:b", nil, v3); v4 != v3+1 {
		e.t.Fatalf("removing an absent entry: version %d, want %d", v4, v3+1)
	}
}

func overridesVersionConflict(e *env) {
	v1 := e.setOverride("app:a", []byte(`1`), 0)
	_, err := e.s.SetOverride(context.Background(), e.cluster.ID, store.OverrideChange{Key: "app:a", Value: []byte(`2`), IfVersion: 0})
	if !errors.Is(err, store.ErrVersionConflict) {
		e.t.Fatalf("stale version: err = %v, want ErrVersionConflict", err)
	}
	o := e.overrides()
	if o.Version != v1 || string(o.Entries["app:a"]) != `1` {
		e.t.Fatalf("a conflicting change changed something: %+v", o)
	}
}

func overridesVersionInReport(e *env) {
	if st := e.report("i1", 0); st.ConfigVersion != 0 {
		e.t.Fatalf("ConfigVersion without overrides = %d, want 0", st.ConfigVersion)
	}
	v := e.setOverride("app:a", []byte(`{}`), 0)
	if st := e.report("i1", 0); st.ConfigVersion != v {
		e.t.Fatalf("ConfigVersion = %d, want %d", st.ConfigVersion, v)
	}
	// With L1 too.
	e.cluster.Capacity = 1000
	if st := e.report("i2", 0); st.ConfigVersion != v {
		e.t.Fatalf("ConfigVersion with L1 = %d, want %d", st.ConfigVersion, v)
	}
}

func overridesInvalidChange(e *env) {
	for _, ch := range []store.OverrideChange{
		{Key: ""},
		{Key: "version", Value: []byte(`1`)},
		{Key: "app:a", Value: []byte(`1`), IfVersion: 1 << 60},
	} {
		if _, err := e.s.SetOverride(context.Background(), e.cluster.ID, ch); err == nil {
			e.t.Errorf("SetOverride(%+v) = nil error, want one", ch)
		}
	}
	if o := e.overrides(); o.Version != 0 || len(o.Entries) != 0 {
		e.t.Fatalf("invalid changes changed something: %+v", o)
	}
}

func overridesWatch(e *env) {
	notified := make(chan struct{}, 16)
	stop := e.s.Watch(e.cluster.ID, func() {
		select {
		case notified <- struct{}{}:
		default:
		}
	})
	defer stop()
	wait := func(what string) {
		e.t.Helper()
		select {
		case <-notified:
		case <-time.After(10 * time.Second):
			e.t.Fatalf("no notification %s", what)
		}
	}
	wait("when the watch is in place")
	e.setOverride("app:a", []byte(`{}`), 0)
	wait("after a change")
}
