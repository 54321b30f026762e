package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// promCluster is a test cluster whose configuration names a Prometheus server.
type promCluster struct {
	*testCluster
	addr string
}

func (c promCluster) Prometheus() string { return c.addr }

// TestRangeWithoutPrometheus: the long ranges say why they are unavailable and what to
// configure; bad parameters are a 400 naming them.
func TestRangeWithoutPrometheus(t *testing.T) {
	c := newCluster(t, "c1", testConfig(), nil)
	var v RangeView
	get(t, apiWith(c), "/rate_limit/history?range=24h", &v)
	if v.Available || v.Range != "24h" || v.StepSeconds != 300 || !strings.Contains(v.Reason, "prometheus <url>") || len(v.Points) != 0 {
		t.Errorf("range without Prometheus: %+v", v)
	}
	for bad, want := range map[string]string{
		"range=2h":             "range: must be one of 1h, 6h, 24h, 7d",
		"range=1h&range=6h":    "range: give it once",
		"range=1h&seconds=60":  "range: give it once",
		"range=1h&app=a&app=b": "range: give it once",
		"range=1h&app=a%20b":   "app id",
	} {
		_, err := call(apiWith(c), http.MethodGet, "/rate_limit/history?"+bad)
		if msg := apiErr(t, err, http.StatusBadRequest); !strings.Contains(msg, want) {
			t.Errorf("%s: %q, want it to contain %q", bad, msg, want)
		}
	}
}

// TestRangeFromPrometheus: with a Prometheus server the range's points come from its range
// queries on the app's series; a server that fails is a 502 naming it without credentials.
func TestRangeFromPrometheus(t *testing.T) {
	old := now
	now = func() time.Time { return time.Unix(1_800_000_000, 0) }
	t.Cleanup(func() { now = old })
	var sawApp bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		sawApp = sawApp || strings.Contains(q, `app="alpha"`)
		result := ""
		if strings.Contains(q, `decision="allowed"`) {
			result = fmt.Sprintf(`{"metric":{},"values":[[%s,"4.25"]]}`, r.URL.Query().Get("end"))
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[`+result+`]}}`)
	}))
	defer srv.Close()
	c := promCluster{newCluster(t, "c1", testConfig(), nil), strings.Replace(srv.URL, "http://", "http://u:pw@", 1)}

	var v RangeView
	get(t, apiWith(c), "/rate_limit/history?range=1h&app=alpha", &v)
	if !v.Available || v.App != "alpha" || len(v.Points) != 241 || v.Points[240].Admitted != 4.25 || !sawApp {
		t.Fatalf("range from Prometheus: available %v app %q, %d points, sawApp %v", v.Available, v.App, len(v.Points), sawApp)
	}
	if v.Source != strings.Replace(srv.URL, "http://", "http://u:xxxxx@", 1) {
		t.Errorf("source %q: want the address with the password redacted", v.Source)
	}

	srv.Close()
	_, err := call(apiWith(c), http.MethodGet, "/rate_limit/history?range=7d")
	if msg := apiErr(t, err, http.StatusBadGateway); !strings.Contains(msg, "prometheus at http://u:xxxxx@") || strings.Contains(msg, "pw") {
		t.Errorf("Prometheus down: %q", msg)
	}
}
