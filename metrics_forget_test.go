package tierbucket

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
)

// storeSeries counts the Store latency and error series of cluster.
func storeSeries(t *testing.T, id string) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 4096)
	cluster.Collector.Collect(ch)
	close(ch)
	n := 0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.Desc().String(), `Desc{fqName: "caddy_rate_limit_store_`) {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "cluster" && l.GetValue() == id {
				n++
			}
		}
	}
	return n
}

// The Store series of a cluster id go with its last state (a reload renamed or removed it), so
// that a process does not keep the series of every cluster id it ever had.
func TestStoreMetricsForgottenWithTheCluster(t *testing.T) {
	const cluster = "metrics-forgotten"
	h := newTestHandler(t, &Handler{
		Cluster: cluster, Key: "{http.request.header.X-App-Id}",
		Apps: map[string]*AppConfig{"a": {Guaranteed: 100, Burst: 100}},
	})
	w := &nopWriter{hdr: http.Header{}}
	if err := h.ServeHTTP(w, benchRequest("a"), nopNext); err != nil || w.status != 0 {
		t.Fatalf("request: %v, status %d", err, w.status)
	}
	if n := storeSeries(t, cluster); n == 0 {
		t.Fatal("no Store series after a lease")
	}
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if n := storeSeries(t, cluster); n != 0 {
		t.Fatalf("%d Store series of the cluster after its state closed, want 0", n)
	}
}
