package tierbucket

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// adapt runs the Caddyfile adapter on src and returns the indented JSON.
func adapt(t *testing.T, src string) (string, error) {
	t.Helper()
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return "", err
	}
	for _, w := range warnings {
		if strings.Contains(w.Message, "rate_limit") {
			t.Errorf("adapter warning: %s", w.String())
		}
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "\t"); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.String(), nil
}

// TestCaddyfileAdaptGolden adapts every valid Caddyfile in testdata and compares the JSON with
// its golden file (go test -run TestCaddyfileAdaptGolden -update rewrites them).
func TestCaddyfileAdaptGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile/*.Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "testdata/example.Caddyfile")
	if len(files) < 5 {
		t.Fatalf("expected the golden Caddyfiles, found %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := adapt(t, string(src))
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			golden := strings.TrimSuffix(f, ".Caddyfile") + ".json"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("adapted JSON differs from %s (run with -update after checking):\n%s", golden, got)
			}
			checkHandlersDecode(t, got)
		})
	}
}

// checkHandlersDecode decodes every rate_limit handler of an adapted config into Handler with
// unknown fields disallowed: the Caddyfile only produces fields the JSON config knows.
func checkHandlersDecode(t *testing.T, cfg string) {
	t.Helper()
	var walk func(v any) int
	walk = func(v any) int {
		n := 0
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "rate_limit" {
				b, _ := json.Marshal(v)
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.DisallowUnknownFields()
				var h struct {
					Handler
					Name string `json:"handler"`
				}
				if err := dec.Decode(&h); err != nil {
					t.Errorf("rate_limit JSON does not decode strictly: %v\n%s", err, b)
				}
				n++
			}
			for _, x := range v {
				n += walk(x)
			}
		case []any:
			for _, x := range v {
				n += walk(x)
			}
		}
		return n
	}
	var root any
	if err := json.Unmarshal([]byte(cfg), &root); err != nil {
		t.Fatal(err)
	}
	if walk(root) == 0 {
		t.Error("no rate_limit handler in the adapted config")
	}
}

// TestCaddyfileFullRoundTrip checks the parsed values of the full example field by field.
func TestCaddyfileFullRoundTrip(t *testing.T) {
	src, err := os.ReadFile("testdata/caddyfile/full.Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	// isolate the rate_limit block
	s := string(src)
	start := strings.Index(s, "rate_limit /objects/*")
	end := strings.Index(s, "\trespond")
	var h Handler
	d := caddyfile.NewTestDispenser(strings.Replace(s[start:end], "/objects/* ", "", 1))
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	switch {
	case h.Cluster != "s3-eu", h.Key != "{http.request.header.X-App-Id}", h.UnknownApp != "isolated",
		h.Capacity != 100000, *h.ReservedRatio != 0.2, *h.EmergencyThreshold != 0.97,
		len(h.EmergencyRatios) != 4 || h.EmergencyRatios[1] != 0.6:
		t.Errorf("top-level fields: %+v", h)
	}
	if a := h.Apps["alpha"]; a == nil || a.Guaranteed != 20000 || a.Burst != 40000 || a.MaxBorrow != 5000 || a.MaxConnections != 200 ||
		time.Duration(a.Warmup) != 30*time.Second {
		t.Errorf("app alpha: %+v", a)
	}
	if a := h.Apps["beta.team:prod"]; a == nil || a.Guaranteed != 500.5 || a.Priority != 2 || !a.Disabled {
		t.Errorf("app beta.team:prod: %+v", a)
	}
	if c := h.Cost; c == nil || c.Quantum != 65536 || c.StreamEstimate != 8<<20 || c.Base["PUT"] != 7 ||
		c.Base["MULTIPART_COMPLETE"] != 10 || !c.ResponseBytes || *c.Bandwidth != 2 || c.Max != 500000 || *c.Default != 2 {
		t.Errorf("cost: %+v", c)
	}
	if c := h.Connections; c == nil || c.App != 500 || c.Cluster != 4000 || time.Duration(c.IdleTimeout) != 10*time.Minute || time.Duration(c.SweepInterval) != 15*time.Second {
		t.Errorf("connections: %+v", c)
	}
	if l := h.Local; l == nil || l.Reserve != 2000 || l.RefillThreshold != 0.3 || l.SyncBatch != 500 ||
		time.Duration(l.StatsInterval) != 5*time.Minute {
		t.Errorf("local: %+v", l)
	}
	if h.OnRedisFailure != "closed" || h.Headers != "draft" || !h.Shadow || !h.Errors || h.MaxWait == 0 ||
		h.Console == nil || h.Console.Prometheus != "http://127.0.0.1:9090" {
		t.Errorf("flags: %+v", h)
	}
}

// TestCaddyfileErrors: strict parsing; every error carries the file and line.
func TestCaddyfileErrors(t *testing.T) {
	cases := []struct {
		name, block, want string
	}{
		{"unknown subdirective", "rate_limit {\n\tfoo 1\n}", `unknown subdirective "foo"`},
		{"duplicate subdirective", "rate_limit {\n\tcapacity 1\n\tcapacity 2\n}", `duplicate subdirective "capacity"`},
		{"duplicate flag", "rate_limit {\n\tshadow\n\tshadow\n}", `duplicate subdirective "shadow"`}, //nolint:dupword // the duplicate is the input
		{"arguments on the directive", "rate_limit foo bar", "takes no arguments"},
		{"duplicate app", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t}\n\tapp a {\n\t\tguaranteed 2\n\t}\n}", `duplicate app "a"`},
		{"app without guaranteed", "rate_limit {\n\tapp a {\n\t\tburst 5\n\t}\n}", "guaranteed is required"},
		{"app unknown field", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\tweight 3\n\t}\n}", `unknown subdirective "weight"`},
		{"app duplicate field", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\tguaranteed 2\n\t}\n}", `duplicate subdirective "guaranteed"`},
		{"app priority range", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\tpriority 4\n\t}\n}", "priority must be 0-3"},
		{"app warmup duration", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\twarmup soon\n\t}\n}", `warmup: "soon" is not a duration`},
		{"app warmup arguments", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\twarmup 1s 2s\n\t}\n}", "exactly one argument"},
		{"app two ids", "rate_limit {\n\tapp a b {\n\t\tguaranteed 1\n\t}\n}", "exactly one argument"},
		{"not a number", "rate_limit {\n\tcapacity lots\n}", `"lots" is not a number`},
		{"capacity unknown block", "rate_limit {\n\tcapacity 1 {\n\t\tlearn\n\t}\n}", `capacity: unknown subdirective "learn"`},
		{"adaptive unknown", "rate_limit {\n\tcapacity 1 {\n\t\tadaptive {\n\t\t\tbeta 0.5\n\t\t}\n\t}\n}", `adaptive: unknown subdirective "beta"`},
		{"adaptive duplicate", "rate_limit {\n\tcapacity 1 {\n\t\tadaptive {\n\t\t\tmin 1\n\t\t\tmin 2\n\t\t}\n\t}\n}", `adaptive: duplicate subdirective "min"`},
		{"adaptive min zero", "rate_limit {\n\tcapacity 1 {\n\t\tadaptive {\n\t\t\tmin 0\n\t\t}\n\t}\n}", "adaptive.min must be more than 0"},
		{"adaptive status", "rate_limit {\n\tcapacity 1 {\n\t\tadaptive {\n\t\t\tthrottle_status 503 299\n\t\t}\n\t}\n}", "299 is not a 4xx or 5xx status, at Caddyfile:5"},
		{"adaptive status empty", "rate_limit {\n\tcapacity 1 {\n\t\tadaptive {\n\t\t\tthrottle_status\n\t\t}\n\t}\n}", "needs at least one status"},
		{"adaptive status word", "rate_limit {\n\tcapacity 1 {\n\t\tadaptive {\n\t\t\tthrottle_status slow\n\t\t}\n\t}\n}", `"slow" is not an integer`},
		{"NaN", "rate_limit {\n\treserved_ratio NaN\n}", "is not a number"},
		{"unknown_app value", "rate_limit {\n\tunknown_app maybe\n}", "unknown_app must be one of shared|isolated|reject"},
		{"headers value", "rate_limit {\n\theaders all\n}", "headers must be one of rejections|draft|legacy|both|off"},
		{"format value", "rate_limit {\n\tformat xml\n}", "format must be one of json|s3"},
		{"on_redis_failure value", "rate_limit {\n\ton_redis_failure panic\n}", "on_redis_failure must be one of local|open|closed"},
		{"emergency_ratios count", "rate_limit {\n\temergency_ratios 1 0.5\n}", "needs 4 values"},
		{"max_wait duration", "rate_limit {\n\tmax_wait soon\n}", "not a duration"},
		{"shadow with argument", "rate_limit {\n\tshadow yes\n}", "takes no arguments"},
		{"cost unknown", "rate_limit {\n\tcost {\n\t\tfree\n\t}\n}", `cost: unknown subdirective "free"`},
		{"cost duplicate", "rate_limit {\n\tcost {\n\t\tmax 5\n\t\tmax 6\n\t}\n}", `cost: duplicate subdirective "max"`},
		{"cost base op", "rate_limit {\n\tcost {\n\t\tbase FETCH 3\n\t}\n}", `unknown operation "FETCH"`},
		{"cost base duplicate", "rate_limit {\n\tcost {\n\t\tbase PUT 3\n\t\tbase put 4\n\t}\n}", "duplicate base PUT"},
		{"cost size", "rate_limit {\n\tcost {\n\t\tquantum 64XB\n\t}\n}", "unknown size unit"},
		{"cost operations", "rate_limit {\n\tcost {\n\t\toperations grpc\n\t}\n}", "operations must be one of s3|http"},
		{"cost validate", "rate_limit {\n\tcost {\n\t\tquantum -5\n\t}\n}", "quantum"},
		{"cost range names its line", "rate_limit {\n\tcost {\n\t\tmax 5\n\t\tbandwidth -1\n\t\tdefault 2\n\t}\n}", "cost.bandwidth must be >= 0, got -1, at Caddyfile:5"},
		{"connections unknown", "rate_limit {\n\tconnections {\n\t\ttotal 5\n\t}\n}", `connections: unknown subdirective "total"`},
		{"connections negative", "rate_limit {\n\tconnections {\n\t\tapp -1\n\t}\n}", "connections.app"},
		// 0 is "not set" in JSON: written in a Caddyfile to block, it would give the default
		{"connections zero", "rate_limit {\n\tconnections {\n\t\tapp 0\n\t}\n}", "connections.app must be more than 0 (leave it out for the default), got 0, at Caddyfile:4"},
		{"idle_timeout zero", "rate_limit {\n\tconnections {\n\t\tidle_timeout 0\n\t}\n}", "connections.idle_timeout must be more than 0"},
		{"max_connections zero", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\tmax_connections 0\n\t}\n}", `app "a": max_connections must be >= 1 and <= 2^53 (leave it out for connections.app), got 0, at Caddyfile:5`},
		{"max_connections negative", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\tmax_connections -1\n\t}\n}", `max_connections must be >= 1 and <= 2^53 (leave it out for connections.app), got -1, at Caddyfile:5`},
		{"max_connections above 2^53", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\tmax_connections 9007199254740993\n\t}\n}", `got 9007199254740993, at Caddyfile:5`},
		{"max_connections beyond int64", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\tmax_connections 99999999999999999999\n\t}\n}", `max_connections: 99999999999999999999 is an integer out of range (beyond ±2^63)`},
		{"connections range names its line", "rate_limit {\n\tconnections {\n\t\tapp 5\n\t\tidle_timeout 1ms\n\t\tcluster 9\n\t}\n}", "connections.idle_timeout must be >= 1s, got 1ms, at Caddyfile:5"},
		{"disabled with an argument", "rate_limit {\n\tapp a {\n\t\tguaranteed 1\n\t\tdisabled yes\n\t}\n}", `disabled`},
		{"console unknown", "rate_limit {\n\tconsole {\n\t\tgrafana http://g\n\t}\n}", `console: unknown subdirective "grafana"`},
		{"console prometheus args", "rate_limit {\n\tconsole {\n\t\tprometheus\n\t}\n}", `prometheus`},
		{"local unknown", "rate_limit {\n\tlocal {\n\t\tcache 5\n\t}\n}", `local: unknown subdirective "cache"`},
		{"local duplicate", "rate_limit {\n\tlocal {\n\t\treserve 5\n\t\treserve 6\n\t}\n}", `local: duplicate subdirective "reserve"`},
		{"redis unknown", "rate_limit {\n\tredis {\n\t\thost x\n\t}\n}", `redis: unknown subdirective "host"`},
		{"redis tls arg", "rate_limit {\n\tredis {\n\t\ttls maybe\n\t}\n}", "tls takes no arguments"},
		{"redis tls_client_auth one file", "rate_limit {\n\tredis {\n\t\ttls_client_auth c.pem\n\t}\n}", "tls_client_auth takes <certificate_file> <key_file>"},
		{"redis tls_trust_pool no module", "rate_limit {\n\tredis {\n\t\ttls_trust_pool\n\t}\n}", "tls_trust_pool needs a CA pool module"},
		{"redis tls_trust_pool unknown module", "rate_limit {\n\tredis {\n\t\ttls_trust_pool vault x\n\t}\n}", "tls.ca_pool.source.vault"},
		{"redis tls_insecure_skip_verify arg", "rate_limit {\n\tredis {\n\t\ttls_insecure_skip_verify yes\n\t}\n}", "tls_insecure_skip_verify takes no arguments"},
		{"redis insecure twice", "rate_limit {\n\tredis {\n\t\ttls insecure_skip_verify\n\t\ttls_insecure_skip_verify\n\t}\n}", `duplicate subdirective "tls_insecure_skip_verify"`},
		{"redis address empty", "rate_limit {\n\tredis {\n\t\taddress\n\t}\n}", "address needs at least one"},
		{"block with argument", "rate_limit {\n\tlocal fast {\n\t}\n}", "local takes no arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := ":8080 {\n" + tc.block + "\n}\n"
			_, err := adapt(t, src)
			if err == nil {
				t.Fatalf("no error for\n%s", src)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "Caddyfile:") {
				t.Errorf("error %q does not name the file and line", err)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"65536": 65536, "64KiB": 65536, "64kib": 65536, "1MiB": 1 << 20, "1mb": 1e6,
		"2KB": 2000, "1GiB": 1 << 30, "10B": 10, "0.5KiB": 512, "64K": 64000, "64Ki": 65536, "1TB": 1e12,
	}
	for in, want := range good {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	// "1,5MiB" and "1,000": humanize.ParseBytes alone reads the comma as a digit-group separator
	for _, in := range []string{"", "KiB", "1.3B", "0.1KiB", "12 parsecs", "-1", "1e3", "1,5MiB", "1,000", "8EiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestCaddyfileAdaptive: `capacity <n> { adaptive { ... } }` sets the capacity and the block;
// the fields left out take their defaults (max = capacity × 2, throttle_status 503 429).
func TestCaddyfileAdaptive(t *testing.T) {
	var h Handler
	src := "rate_limit {\n\tcapacity 1000 {\n\t\tadaptive {\n\t\t\tmin 500\n\t\t\tlatency_target 100ms\n\t\t}\n\t}\n\tapp a {\n\t\tguaranteed 100\n\t\tmax 400\n\t}\n}"
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(src)); err != nil {
		t.Fatal(err)
	}
	if h.Capacity != 1000 || h.Adaptive == nil || h.Adaptive.Min != 500 || time.Duration(h.Adaptive.LatencyTarget) != 100*time.Millisecond {
		t.Fatalf("parsed %+v adaptive %+v", h, h.Adaptive)
	}
	cfg, err := h.limiterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Cluster.Adaptive; a.Min != 500 || a.Max != 2000 || a.LatencyTarget != 100*time.Millisecond {
		t.Errorf("adaptive policy %+v", a)
	}
	if st, _ := h.Adaptive.throttleStatus(); len(st) != 2 || st[0] != 503 || st[1] != 429 {
		t.Errorf("throttle statuses %v, want 503 429", st)
	}
	if cfg.Apps["a"].Max != 400 {
		t.Errorf("app max %v, want 400", cfg.Apps["a"].Max)
	}
	var static Handler
	if err := static.UnmarshalCaddyfile(caddyfile.NewTestDispenser("rate_limit {\n\tcapacity 1000\n}")); err != nil || static.Adaptive != nil {
		t.Errorf("capacity without a block: %v, adaptive %+v", err, static.Adaptive)
	}
}
