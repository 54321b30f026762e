package tierbucket

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tierbucket/caddy-tierbucket/cost"
)

// Fuzz targets of the two ways a handler config comes in: a Caddyfile `rate_limit` block and
// the handler's JSON object. Seeds: the f.Add calls below (every golden config in testdata and
// hostile inputs) and the files under testdata/fuzz/<target>/. scripts/test.sh runs each target
// for a few seconds; by hand:
//
//	go test -run '^$' -fuzz '^FuzzCaddyfile$' -fuzztime 1m .
//	go test -run '^$' -fuzz '^FuzzJSONConfig$' -fuzztime 1m .

// fuzzProvisionCheck runs the validation of (*Handler).setup, which touches no shared state
// (configure), so that a fuzzed Redis config never dials anything.
func fuzzProvisionCheck(h *Handler) error {
	_, err := h.configure()
	return err
}

// fuzzFieldNames are the names a validation error must mention (every error names its field),
// as in the Caddyfile and the JSON config.
var fuzzFieldNames = []string{
	"cluster", "key", "unknown_app", "capacity", "reserved_ratio", "emergency_threshold",
	"emergency_ratios", "apps", "cost.", "connections.", "local.", "redis.", "on_redis_failure",
	"max_wait", "headers", "format", "adaptive", "console.",
}

func fuzzNamesField(msg string) bool {
	for _, f := range fuzzFieldNames {
		if strings.Contains(msg, f) {
			return true
		}
	}
	return false
}

// fuzzReadsFiles reports whether provisioning h would read a file: {file.*} placeholders are
// replaced in the redis fields. A fuzz input must not depend on (or block on) the machine's
// files, so such inputs are skipped.
func fuzzReadsFiles(h *Handler) bool {
	r := h.Redis
	if r == nil {
		return false
	}
	for _, s := range append([]string{r.URL, r.Sentinel, r.Username, r.Password}, r.Address...) {
		if strings.Contains(s, "{file.") {
			return true
		}
	}
	return false
}

// fuzzCheckAccepted checks a handler that decoded (from a Caddyfile block or JSON):
//   - validation either accepts it or returns an error naming a field;
//   - its JSON decodes strictly, as Caddy decodes a module, into a handler that marshals to the
//     same JSON and validates the same way (the Caddyfile and JSON forms mean the same thing);
//   - an accepted cost block has one meaning: no two base keys name the same operation with
//     different values (cost.New applies them in map order).
func fuzzCheckAccepted(t *testing.T, h *Handler, origin string) {
	t.Helper()
	if fuzzReadsFiles(h) {
		return // a {file.*} placeholder: provisioning would read the machine's files
	}
	verr := fuzzProvisionCheck(h)
	if verr != nil && (verr.Error() == "" || !fuzzNamesField(verr.Error())) {
		t.Fatalf("%s: validation error %q does not name a field", origin, verr)
	}
	j1, err := json.Marshal(h)
	if err != nil {
		t.Fatalf("%s: marshal: %v", origin, err)
	}
	var h2 Handler
	if err := caddy.StrictUnmarshalJSON(j1, &h2); err != nil {
		t.Fatalf("%s: its own JSON does not decode: %v\n%s", origin, err, j1)
	}
	j2, err := json.Marshal(&h2)
	if err != nil {
		t.Fatalf("%s: marshal after the round trip: %v", origin, err)
	}
	if !bytes.Equal(j1, j2) {
		t.Fatalf("%s: JSON round trip differs:\nfirst  %s\nsecond %s", origin, j1, j2)
	}
	if verr != nil {
		return
	}
	// Only accepted configs must keep their meaning: a rejected one may marshal to a valid one
	// (`"emergency_ratios": []` is rejected, and omitempty drops it).
	if err := fuzzProvisionCheck(&h2); err != nil {
		t.Fatalf("%s: accepted, but rejected after the JSON round trip: %v\n%s", origin, err, j1)
	}
	if h.Cost != nil {
		seen := map[cost.Operation]int64{}
		for _, name := range sortedKeys(h.Cost.Base) {
			op, _ := cost.ParseOperation(name)
			if v, dup := seen[op]; dup && v != h.Cost.Base[name] {
				msg := fmt.Sprintf("%s: accepted cost.base names %s twice with different values (%d, %d): the "+
					"model depends on map order\n%s", origin, op, v, h.Cost.Base[name], j1)
				t.Fatal(msg)
			}
			seen[op] = h.Cost.Base[name]
		}
	}
}

// fuzzRateLimitBodies returns the body of every `rate_limit` block of a Caddyfile ("" for a
// rate_limit without a block), found by line and brace count (good enough for testdata).
func fuzzRateLimitBodies(src string) []string {
	var out []string
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line != "rate_limit" && !strings.HasPrefix(line, "rate_limit ") {
			continue
		}
		if !strings.HasSuffix(line, "{") {
			out = append(out, "")
			continue
		}
		depth, j := 1, i+1
		for ; j < len(lines) && depth > 0; j++ {
			l := strings.TrimSpace(lines[j])
			if strings.HasSuffix(l, "{") {
				depth++
			}
			if l == "}" {
				depth--
			}
		}
		out = append(out, strings.Join(lines[i+1:j-1], "\n"))
		i = j - 1
	}
	return out
}

func fuzzTestdataFiles(tb testing.TB, patterns ...string) map[string][]byte {
	tb.Helper()
	files := map[string][]byte{}
	for _, p := range patterns {
		names, err := filepath.Glob(p)
		if err != nil {
			tb.Fatal(err)
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				tb.Fatal(err)
			}
			files[n] = b
		}
	}
	if len(files) == 0 {
		tb.Fatalf("no seed files match %v", patterns)
	}
	return files
}

func fuzzCaddyfileSeeds(tb testing.TB) []string {
	var seeds []string
	files := fuzzTestdataFiles(tb, "testdata/caddyfile/*.Caddyfile", "testdata/example.Caddyfile")
	for _, name := range sortedKeys(files) {
		bodies := fuzzRateLimitBodies(string(files[name]))
		if len(bodies) == 0 {
			tb.Fatalf("%s: no rate_limit block", name)
		}
		seeds = append(seeds, bodies...)
	}
	long := strings.Repeat("a", 200)
	return append(seeds,
		"}",
		"{",
		"}\n}\n{\n",
		"app a {\n\tguaranteed 1\n",
		"capacity 1e309",
		"capacity -1e309",
		"capacity 1e308\napp a {\n\tguaranteed 1e308\n}\napp b {\n\tguaranteed 1e308\n}",
		"reserved_ratio -0",
		"emergency_ratios NaN Inf -Inf 0",
		"max_wait -5s",
		"max_wait 106751d",
		"local {\n\tsync_interval -1h\n\tlease_ttl -1ns\n}",
		"connections {\n\tidle_timeout -10m\n}",
		"app "+long+" {\n\tguaranteed 1\n}",
		"cluster "+long,
		"app * {\n\tguaranteed 1e-320\n}",
		"app a {\n\tguaranteed 1\n\tpriority 9223372036854775808\n}",
		"app a {\n\tguaranteed 1\n\tmax_connections -9223372036854775808\n}",
		"cluster \"a\x00b\"",
		"key \"{\x00}\"",
		"key \"{http.request.header.}\"",
		"headers \x00",
		"cost {\n\tquantum 9223372036854775807GiB\n}",
		"cost {\n\tquantum 0.5KiB\n\tstream_estimate 99999999999GiB\n}",
		"cost {\n\tbase put 1\n\tbase PUT 2\n}",
		"cost {\n\tbase OTHER -1\n}",
		"key <<EOF\n\tx\n\tEOF",
		"key \"unterminated",
		"redis {\n\taddress {env.FUZZ_UNSET}:1\n}",
		"redis {\n\turl redis://user:pass@host:99999/0\n}",
		"redis {\n\taddress [::1]:6379 10.0.0.1:0\n\tdb 3\n}",
		"redis {\n\ttls insecure_skip_verify extra\n}",
		"console {\n\tprometheus 0\n}",
	)
}

// FuzzCaddyfile feeds arbitrary text as the body of a `rate_limit { ... }` block through the
// Caddyfile parser (caddyfile.Parse, then the segment of each rate_limit directive with its
// matcher token removed, as httpcaddyfile hands it to the directive) and UnmarshalCaddyfile.
// Properties: no panic; a parse error names the file and line; an accepted block passes
// fuzzCheckAccepted (validation error names a field, the JSON round-trips).
func FuzzCaddyfile(f *testing.F) {
	for _, s := range fuzzCaddyfileSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if strings.Contains(body, "import") {
			return // import reads files
		}
		src := ":8080 {\n\trate_limit {\n" + body + "\n\t}\n}\n"
		blocks, err := caddyfile.Parse("Caddyfile", []byte(src))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("caddyfile.Parse: empty error")
			}
			return
		}
		for _, sb := range blocks {
			for _, seg := range sb.Segments {
				if seg.Directive() != "rate_limit" {
					continue
				}
				d := caddyfile.NewDispenser(seg)
				d.Next()
				if d.NextArg() {
					if m := d.Val(); m == "*" || strings.HasPrefix(m, "/") || strings.HasPrefix(m, "@") {
						d.Delete()
					}
				}
				d.Reset()
				var h Handler
				if err := h.UnmarshalCaddyfile(d); err != nil {
					if !strings.Contains(err.Error(), "Caddyfile:") {
						t.Fatalf("error %q does not name the file and line", err)
					}
					continue
				}
				fuzzCheckAccepted(t, &h, "Caddyfile")
			}
		}
	})
}

// fuzzHandlerObjects returns every `"handler": "rate_limit"` object of a Caddy JSON config,
// without the "handler" key: what Caddy hands to the module's decoder.
func fuzzHandlerObjects(tb testing.TB, cfg []byte) [][]byte {
	var root any
	if err := json.Unmarshal(cfg, &root); err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "rate_limit" {
				m := map[string]any{}
				for k, x := range v {
					if k != "handler" {
						m[k] = x
					}
				}
				b, err := json.Marshal(m)
				if err != nil {
					tb.Fatal(err)
				}
				out = append(out, b)
			}
			for _, k := range sortedKeys(v) {
				walk(v[k])
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(root)
	return out
}

func fuzzJSONSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	files := fuzzTestdataFiles(tb, "testdata/caddyfile/*.json", "testdata/example.json")
	for _, name := range sortedKeys(files) {
		objs := fuzzHandlerObjects(tb, files[name])
		if len(objs) == 0 {
			tb.Fatalf("%s: no rate_limit handler", name)
		}
		seeds = append(seeds, objs...)
	}
	seeds = append(seeds, files["testdata/example.json"]) // a whole config: not a handler object
	long := strings.Repeat("x", 200)
	for _, s := range []string{
		`{}`, `null`, `[]`, `""`, `0`, `{}garbage`, `{"capacity":1}{"capacity":-1}`,
		`{"capacity":"NaN"}`, `{"capacity":NaN}`, `{"reserved_ratio":"Infinity"}`, `{"capacity":1e309}`,
		`{"capacity":-0,"reserved_ratio":-0}`, `{"capacity":1e308,"apps":{"a":{"guaranteed":1e308},"b":{"guaranteed":1e308}}}`,
		`{"apps":{"*":{"guaranteed":1e-320}}}`,
		`{"max_wait":9223372036854775808}`, `{"max_wait":"9999999999h"}`, `{"max_wait":"-1ns"}`, `{"max_wait":1.5}`,
		`{"apps":{"a":{"guaranteed":1,"priority":99999999999999999999}}}`,
		`{"apps":{"a":{"guaranteed":1,"priority":1e2}}}`,
		`{"apps":[]}`, `{"apps":{"a":"x"}}`, `{"apps":{"a":null}}`, `{"apps":{"":{"guaranteed":1}}}`,
		`{"apps":{"` + long + `":{"guaranteed":1}}}`, `{"cluster":"` + long + `"}`,
		`{"emergency_ratios":[[[[1]]]]}`, `{"emergency_ratios":[]}`, `{"emergency_ratios":null}`,
		`{"apps":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
		`{"cost":{"base":{"put":3,"PUT":4}}}`, `{"cost":{"base":{"OTHER":-1}}}`, `{"cost":{"quantum":-9223372036854775808}}`,
		`{"cost":{"operations":"HTTP","bandwidth":0,"default":0}}`, `{"cost":{"bandwidth":null}}`,
		`{"connections":{"idle_timeout":"-1ns","total":5}}`, `{"connections":{"app":"5"}}`, `{"connections":[]}`,
		`{"local":{"sync_interval":"1d","reserve":-1}}`, `{"local":{"refill_threshold":"0.5"}}`,
		`{"redis":{"address":["[::1]:6379"],"url":"redis://x"}}`, `{"redis":{"timeout":"1s","address":["a:1"]}}`,
		`{"redis":{"address":["{env.FUZZ_UNSET}:1"],"password":"{env.FUZZ_UNSET}"}}`, `{"redis":{"url":"rediss://:@:0/-1"}}`,
		`{"headers":"\u0000"}`, `{"key":"{"}`, `{"key":"\ud800"}`, `{"unknown_app":"Shared"}`,
		`{"shadow":"true"}`, `{"errors":1}`, `{"Capacity":5}`, `{"capacity":5,"capacity":-5}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// FuzzJSONConfig decodes arbitrary bytes into a Handler as Caddy decodes a module
// (caddy.StrictUnmarshalJSON: encoding/json, unknown fields disallowed) and runs the
// provisioning-time validation. Properties: no panic; a decode error is non-empty; an accepted
// object passes fuzzCheckAccepted (validation error names a field, the JSON round-trips).
func FuzzJSONConfig(f *testing.F) {
	for _, s := range fuzzJSONSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Handler
		if err := caddy.StrictUnmarshalJSON(data, &h); err != nil {
			if err.Error() == "" {
				t.Fatal("decode: empty error")
			}
			return
		}
		fuzzCheckAccepted(t, &h, "JSON")
	})
}
