package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// dashboardPath is the Grafana dashboard of the plugin's metrics, from this directory.
var dashboardPath = filepath.Join("..", "dashboards", "tierbucket.json")

// metricsFamily is the prefix of every metric the plugin exports, and the only family the
// dashboard may query.
const metricsFamily = "caddy_rate_limit_"

var (
	// reSelector is a series selector of the plugin's family with its optional label matchers.
	reSelector = regexp.MustCompile(`(caddy_rate_limit_[a-z_]+)(\{[^}]*\})?`)
	// PromQL pieces removed before looking for metric names (metricNames).
	reString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	reMatchers = regexp.MustCompile(`\{[^}]*\}`)
	reRange    = regexp.MustCompile(`\[[^\]]*\]`)
	reGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	reVariable = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	reIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
)

// promKeywords are the PromQL words that are neither functions nor metric names.
var promKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
	"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "start": true, "end": true,
}

// dashPanel is what the test checks of a panel.
type dashPanel struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"` // the panels of a collapsed row
}

type dashboard struct {
	UID           string      `json:"uid"`
	SchemaVersion int         `json:"schemaVersion"`
	Panels        []dashPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
}

// loadDashboard reads the dashboard both generically (raw) and into its checked fields.
func loadDashboard(t *testing.T) (raw any, d dashboard) {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardPath, err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return raw, d
}

// collectStrings walks any JSON value and returns every string value of an object key named key.
func collectStrings(v any, key string) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == key {
					out = append(out, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	sort.Strings(out)
	return out
}

// metricNames returns the metric names a PromQL expression selects: what is left once strings,
// label matchers, ranges, grouping label lists and Grafana variables are removed, minus function
// names (an identifier followed by "(") and keywords.
func metricNames(expr string) []string {
	s := reString.ReplaceAllString(expr, `""`)
	s = reMatchers.ReplaceAllString(s, " ")
	s = reRange.ReplaceAllString(s, " ")
	s = reGrouping.ReplaceAllString(s, " ")
	s = reVariable.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range reIdent.FindAllStringIndex(s, -1) {
		if loc[0] > 0 && strings.ContainsRune("0123456789.", rune(s[loc[0]-1])) {
			continue // the exponent or suffix of a number (1e3, 0x1f)
		}
		word := s[loc[0]:loc[1]]
		if promKeywords[strings.ToLower(word)] {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function
		}
		out = append(out, word)
	}
	return out
}

// checkPanels checks that every panel has a title, and a unit unless it is a row or a text panel.
func checkPanels(t *testing.T, panels []dashPanel) (n int) {
	t.Helper()
	for _, p := range panels {
		n++
		if strings.TrimSpace(p.Title) == "" {
			t.Errorf("a %s panel has no title", p.Type)
		}
		if p.Type != "row" && p.Type != "text" && p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("panel %q (%s) has no unit (fieldConfig.defaults.unit)", p.Title, p.Type)
		}
		if p.Type != "row" && p.Type != "text" && len(p.Targets) == 0 {
			t.Errorf("panel %q (%s) has no query", p.Title, p.Type)
		}
		n += checkPanels(t, p.Panels)
	}
	return n
}

// TestDashboardStatic checks the dashboard alone (it runs with -short too): JSON, uid, schema,
// the variables cluster and app, a title and a unit on every panel, and queries that only use
// the plugin's metric family.
func TestDashboardStatic(t *testing.T) {
	raw, d := loadDashboard(t)
	if d.UID != "tierbucket" {
		t.Errorf("uid %q, want tierbucket", d.UID)
	}
	if d.SchemaVersion != 39 {
		t.Errorf("schemaVersion %d, want 39", d.SchemaVersion)
	}

	vars := map[string]int{}
	for i, v := range d.Templating.List {
		vars[v.Name] = i
	}
	for _, name := range []string{"cluster", "app"} {
		i, ok := vars[name]
		if !ok {
			t.Errorf("no template variable %q", name)
			continue
		}
		v := d.Templating.List[i]
		if v.Type != "query" || !strings.Contains(string(v.Query)+v.Definition, "label_values(") {
			t.Errorf("variable %q: type %q query %s, want a label_values query", name, v.Type, v.Query)
		}
		if name == "app" && (!v.Multi || !v.IncludeAll) {
			t.Errorf("variable app: multi %v includeAll %v, want both", v.Multi, v.IncludeAll)
		}
	}

	if n := checkPanels(t, d.Panels); n == 0 {
		t.Fatal("the dashboard has no panels")
	}

	exprs := collectStrings(raw, "expr")
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no queries (expr)")
	}
	for _, e := range exprs {
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("query %q selects no metric", e)
		}
		for _, m := range names {
			if !strings.HasPrefix(m, metricsFamily) {
				t.Errorf("query %q uses %q, outside the %s* family", e, m, metricsFamily)
			}
		}
		sels := reSelector.FindAllStringSubmatch(e, -1)
		for _, sel := range sels {
			if !strings.Contains(sel[2], `cluster=~"$cluster"`) {
				t.Errorf("query %q: %s does not filter on cluster=~\"$cluster\"", e, sel[1])
			}
		}
	}
}

// scrape is the plugin's part of one /metrics scrape.
type scrape struct {
	types  map[string]string          // family -> counter|gauge|histogram|...
	labels map[string]map[string]bool // family -> the label names its samples carry
}

// family maps a sample or selector name to its family: itself, or for a histogram's or
// summary's _bucket/_sum/_count series, the histogram. "" if the scrape has no such family.
func (s scrape) family(name string) string {
	if _, ok := s.types[name]; ok {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		if typ := s.types[base]; typ == "histogram" || typ == "summary" ||
			(typ == "gaugehistogram" && suf != "_sum" && suf != "_count") {
			return base
		}
	}
	return ""
}

// scrapeMetrics reads g's admin /metrics and keeps the caddy_rate_limit_ families.
func scrapeMetrics(t *testing.T, g *gateway) scrape {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	s := scrape{types: map[string]string{}, labels: map[string]map[string]bool{}}
	var samples []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if fields := strings.Fields(f); len(fields) == 2 && strings.HasPrefix(fields[0], metricsFamily) {
				s.types[fields[0]] = fields[1]
			}
			continue
		}
		if strings.HasPrefix(line, metricsFamily) {
			samples = append(samples, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	reLabel := regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="`)
	for _, line := range samples {
		name, lbl := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
			if line[i] == '{' {
				lbl = line[i:]
			}
		}
		fam := s.family(name)
		if fam == "" {
			t.Errorf("sample without a # TYPE line: %q", line)
			continue
		}
		if s.labels[fam] == nil {
			s.labels[fam] = map[string]bool{}
		}
		for _, m := range reLabel.FindAllStringSubmatch(lbl, -1) {
			s.labels[fam][m[1]] = true
		}
	}
	return s
}

// dashboardSite is the site of TestDashboardMetrics: one app with a burst of 3 on the memory
// Store.
const dashboardSite = `	rate_limit {
		cluster dash
		key {http.request.header.X-App-Id}
		unknown_app reject
		capacity 1000
		app alpha {
			guaranteed 0.01
			burst 3
		}
	}
	respond "{http.rate_limit.remaining}"`

// TestDashboardMetrics: every metric the dashboard queries (panels and variables) is one the
// real binary exports, with the labels the queries filter on, after traffic with both admitted
// and rejected requests.
func TestDashboardMetrics(t *testing.T) {
	raw, d := loadDashboard(t)
	g := startGateway(t, "dashboard", dashboardSite)

	var admitted, rejected int
	for i := 0; i < 6; i++ {
		switch r := g.send("GET", "/bucket/key", "alpha", ""); r.status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			rejected++
		default:
			t.Fatalf("request %d: %d %q", i+1, r.status, r.body)
		}
	}
	if admitted == 0 || rejected == 0 {
		t.Fatalf("admitted %d, rejected %d: want both", admitted, rejected)
	}
	// requests are counted when they finish: wait until both decisions are in the scrape
	g.waitMetric(5*time.Second, func(v float64) bool { return v == float64(admitted) },
		"caddy_rate_limit_requests_total", `cluster="dash"`, `app="alpha"`, `decision="allowed"`)
	g.waitMetric(5*time.Second, func(v float64) bool { return v == float64(rejected) },
		"caddy_rate_limit_requests_total", `cluster="dash"`, `app="alpha"`, `decision="rejected"`)

	s := scrapeMetrics(t, g)
	if len(s.types) == 0 {
		t.Fatal("the scrape has no caddy_rate_limit_ family")
	}

	queries := collectStrings(raw, "expr")
	var varQueries []string
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			varQueries = append(varQueries, v.Definition, variableQuery(t, v.Query))
		}
	}
	used := map[string]bool{}
	for _, q := range append(queries, varQueries...) {
		for _, sel := range reSelector.FindAllStringSubmatch(q, -1) {
			fam := s.family(sel[1])
			if fam == "" {
				t.Errorf("query %q uses %s: no # TYPE %s in the scrape", q, sel[1], sel[1])
				continue
			}
			used[fam] = true
			for _, m := range regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`).FindAllStringSubmatch(sel[2], -1) {
				if !s.labels[fam][m[1]] {
					t.Errorf("query %q filters %s on label %q, which its samples do not have", q, sel[1], m[1])
				}
			}
			if s.labels[fam]["app"] && !strings.Contains(sel[2], `app=~"$app"`) && slices.Contains(queries, q) {
				t.Errorf("query %q: %s has an app label but is not filtered on app=~\"$app\"", q, sel[1])
			}
		}
	}
	if len(used) == 0 {
		t.Fatal("the dashboard queries no caddy_rate_limit_ metric")
	}

	var unused []string
	for fam := range s.types {
		if !used[fam] {
			unused = append(unused, fam)
		}
	}
	sort.Strings(unused)
	t.Logf("dashboard: %d queries use %d of the %d exported families; not on the dashboard: %v",
		len(queries), len(used), len(s.types), unused)
	if t.Failed() {
		fams := make([]string, 0, len(s.types))
		for f, typ := range s.types {
			fams = append(fams, fmt.Sprintf("%s (%s)", f, typ))
		}
		sort.Strings(fams)
		t.Logf("exported families:\n%s", strings.Join(fams, "\n"))
	}
}

// variableQuery is the query of a query variable: a string, or the "query" field of the object
// Grafana's Prometheus variable editor writes.
func variableQuery(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var obj struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Errorf("variable query %s: %v", raw, err)
	}
	return obj.Query
}
