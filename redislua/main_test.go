package redislua

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var prefixSeq atomic.Int64

// uniquePrefix keeps tests that share one server apart.
func uniquePrefix(t testing.TB) string {
	return "t" + strconv.FormatInt(prefixSeq.Add(1), 10)
}

// standaloneClient is a client of the shared standalone server, closed at the end of the test.
func standaloneClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.SharedStandalone(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterClient is a client of the shared 3-master cluster.
func clusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.SharedCluster(t)})
	t.Cleanup(func() { c.Close() })
	return c
}
