package limiter

import (
	"context"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestDisabledAppIsRefusedFleetWideAndComesBack: an override with enabled false refuses the
// app on every instance at their next sync, without taking tokens or waiting; enabled true
// (or removing the override) admits it again with the tokens it had.
func TestDisabledAppIsRefusedFleetWideAndComesBack(t *testing.T) {
	ls, _, c := fleetOf(t, 2, baseConfig())
	a, b := ls[0], ls[1]
	syncAll(ls, c)
	ctx := context.Background()
	if d := mustApp(t, b, "a").Take(ctx, 1, 0); !d.Allowed {
		t.Fatalf("before: %+v", d)
	}

	if _, err := a.SetAppOverride(ctx, "a", &AppOverride{Enabled: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	syncAll(ls, c)
	for i, l := range ls {
		app := mustApp(t, l, "a")
		before := app.Remaining()
		d := app.Take(ctx, 1, LongestWait) // a max wait does not make it wait
		if d.Allowed || d.Reason != store.ReasonAppDisabled || d.RetryAfter != 0 {
			t.Errorf("instance %d disabled: %+v, want refused app_disabled without retry", i+1, d)
		}
		if app.Remaining() != before {
			t.Errorf("instance %d: a refusal of a disabled app took tokens: %d → %d", i+1, before, app.Remaining())
		}
		if p := l.Config().Apps["a"]; !p.Disabled || p.Guaranteed != 100 {
			t.Errorf("instance %d policy %+v: want disabled with its configured rate", i+1, p)
		}
	}
	if d := mustApp(t, b, "p3").Take(ctx, 1, 0); !d.Allowed {
		t.Errorf("another app refused: %+v", d)
	}

	if _, err := b.SetAppOverride(ctx, "a", &AppOverride{Enabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	syncAll(ls, c)
	for i, l := range ls {
		if d := mustApp(t, l, "a").Take(ctx, 1, 0); !d.Allowed {
			t.Errorf("instance %d enabled again: %+v", i+1, d)
		}
	}
}

// TestConfiguredDisabledAppAndOverride: an app disabled in the configuration is refused, and an
// override with enabled true admits it fleet-wide.
func TestConfiguredDisabledAppAndOverride(t *testing.T) {
	cfg := baseConfig()
	p := cfg.Apps["a"]
	p.Disabled = true
	cfg.Apps["a"] = p
	ls, _, c := fleetOf(t, 1, cfg)
	l := ls[0]
	syncAll(ls, c)
	ctx := context.Background()
	if d := mustApp(t, l, "a").Take(ctx, 1, 0); d.Reason != store.ReasonAppDisabled {
		t.Fatalf("configured disabled: %+v", d)
	}
	if _, err := l.SetAppOverride(ctx, "a", &AppOverride{Enabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if d := mustApp(t, l, "a").Take(ctx, 1, 0); !d.Allowed {
		t.Fatalf("enabled by override: %+v", d)
	}
}
