package promhistory

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fakeServer answers query_range with answer(query), and records the queries it was asked.
func fakeServer(t *testing.T, answer func(query string, start, end int64) string) (*httptest.Server, *[]string) {
	t.Helper()
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/prefix/api/v1/query_range" {
			http.Error(w, `{"status":"error","error":"not found"}`, http.StatusNotFound)
			return
		}
		q := r.URL.Query()
		queries = append(queries, q.Get("query"))
		var start, end int64
		fmt.Sscan(q.Get("start"), &start)
		fmt.Sscan(q.Get("end"), &end)
		fmt.Fprint(w, answer(q.Get("query"), start, end))
	}))
	t.Cleanup(srv.Close)
	return srv, &queries
}

func TestFleetLaysTheAnswersOnTheStepGrid(t *testing.T) {
	rg, err := ParseRange("1h")
	if err != nil {
		t.Fatal(err)
	}
	end := time.Unix(1_800_000_007, 400_000_000) // the grid ends at the whole second
	srv, queries := fakeServer(t, func(query string, start, end int64) string {
		var result string
		switch {
		case strings.Contains(query, `decision="allowed"`):
			result = fmt.Sprintf(`{"metric":{},"values":[[%d,"12.5"],[%d,"3"]]}`, start, end)
		case strings.Contains(query, `decision="rejected"`):
			result = fmt.Sprintf(`{"metric":{"reason":"quota_exceeded"},"values":[[%d,"2"]]},{"metric":{"reason":"emergency"},"values":[[%d,"1"],[%d,"9"]]}`, end, end, end+7)
		case strings.Contains(query, "count("):
			result = fmt.Sprintf(`{"metric":{},"values":[[%d,"2"]]}`, end)
		}
		return `{"status":"success","data":{"resultType":"matrix","result":[` + result + `]}}`
	})
	src, err := New(srv.URL + "/prefix/")
	if err != nil {
		t.Fatal(err)
	}
	pts, err := src.Fleet(context.Background(), `c"1`, rg, end)
	if err != nil {
		t.Fatal(err)
	}
	if want := int(time.Hour/(15*time.Second)) + 1; len(pts) != want {
		t.Fatalf("%d points, want %d", len(pts), want)
	}
	first, last := pts[0], pts[len(pts)-1]
	if last.T != 1_800_000_007 || first.T != last.T-3600 {
		t.Fatalf("grid %d..%d, want %d..%d", first.T, last.T, 1_800_000_007-3600, 1_800_000_007)
	}
	if first.Admitted != 12.5 || last.Admitted != 3 {
		t.Errorf("admitted first %v last %v, want 12.5 and 3", first.Admitted, last.Admitted)
	}
	if last.Rejected != 3 || last.Reasons["quota_exceeded"] != 2 || last.Reasons["emergency"] != 1 {
		t.Errorf("last point rejected %v %v, want 3 (2 quota_exceeded, 1 emergency; the off-grid sample dropped)", last.Rejected, last.Reasons)
	}
	if last.Instances != 2 || first.Instances != 0 {
		t.Errorf("instances first %d last %d, want 0 and 2", first.Instances, last.Instances)
	}
	for _, q := range *queries {
		if !strings.Contains(q, `cluster="c\"1"`) {
			t.Errorf("query %s does not quote the cluster id as a PromQL string", q)
		}
	}
}

func TestAppQueriesSelectTheApp(t *testing.T) {
	rg, _ := ParseRange("7d")
	srv, queries := fakeServer(t, func(string, int64, int64) string {
		return `{"status":"success","data":{"resultType":"matrix","result":[]}}`
	})
	src, _ := New(srv.URL + "/prefix")
	if _, err := src.App(context.Background(), "c1", "alpha", rg, time.Unix(1_800_000_000, 0)); err != nil {
		t.Fatal(err)
	}
	var app, cluster int
	for _, q := range *queries {
		switch {
		case strings.Contains(q, `cluster="c1",app="alpha"`):
			app++
		case strings.Contains(q, `cluster="c1"`):
			cluster++ // usage and instances are the cluster's
		default:
			t.Errorf("query %s selects neither", q)
		}
	}
	if app == 0 || cluster == 0 {
		t.Errorf("%d app queries, %d cluster queries; want both", app, cluster)
	}
}

func TestErrorsNameTheServerWithoutItsCredentials(t *testing.T) {
	rg, _ := ParseRange("6h")
	srv, _ := fakeServer(t, func(string, int64, int64) string {
		return `{"status":"error","errorType":"bad_data","error":"parse error"}`
	})
	withCreds := strings.Replace(srv.URL, "http://", "http://scraper:s3cret@", 1) + "/prefix"
	for name, addr := range map[string]string{
		"api error":   withCreds,
		"unreachable": "http://scraper:s3cret@127.0.0.1:1",
		"not the api": strings.Replace(srv.URL, "http://", "http://scraper:s3cret@", 1) + "/elsewhere",
	} {
		src, err := New(addr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.Fleet(context.Background(), "c1", rg, time.Now())
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "prometheus at http://scraper:xxxxx@") {
			t.Errorf("%s: error %q: want the redacted address and no password", name, err)
		}
	}
}

func TestValidateURL(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:9090", "https://prom.example/prefix/"} {
		if _, err := ValidateURL(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:9090", "ftp://x", "http://", "http://x/?q=1", "http://x/#f", "http://u:p@x/%zz"} {
		_, err := ValidateURL(bad)
		if err == nil {
			t.Errorf("%q: accepted", bad)
		} else if strings.Contains(err.Error(), ":p@") {
			t.Errorf("%q: error %q shows the password", bad, err)
		}
	}
	if _, err := ParseRange("2h"); err == nil || !strings.Contains(err.Error(), "1h, 6h, 24h, 7d") {
		t.Errorf("ParseRange(2h) = %v, want an error listing the ranges", err)
	}
}
