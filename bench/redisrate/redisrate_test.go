package redisrate

import (
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`redis_rate_bench {
		address 127.0.0.1:6379
		key {http.request.header.X-App}
		rate 200
		burst 300
		period 2s
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := Handler{
		Address: "127.0.0.1:6379", Key: "{http.request.header.X-App}", Rate: 200, Burst: 300,
		Period: caddy.Duration(2 * time.Second),
	}
	if h.Address != want.Address || h.Key != want.Key || h.Rate != want.Rate || h.Burst != want.Burst || h.Period != want.Period {
		t.Fatalf("got %+v, want %+v", h, want)
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	for _, src := range []string{
		"redis_rate_bench {\n rate x\n}",
		"redis_rate_bench {\n bogus 1\n}",
		"redis_rate_bench {\n rate 1 2\n}",
		"redis_rate_bench {\n period\n}",
		"redis_rate_bench arg",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(src)); err == nil {
			t.Errorf("accepted %q", src)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, h := range []Handler{{Rate: 1}, {Address: "a:1"}, {Address: "a:1", Rate: 1, Burst: -1}} {
		if err := h.Validate(); err == nil {
			t.Errorf("accepted %+v", h)
		}
	}
}
