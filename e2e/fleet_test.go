package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fleet is the Redis side of a test: a client on the test's redis-server and the key schema of
// for one key prefix and one cluster id.
type fleet struct {
	t       *testing.T
	rdb     *redis.Client
	prefix  string
	cluster string
}

func newFleet(t *testing.T, addr, prefix, cluster string) *fleet {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { rdb.Close() })
	return &fleet{t: t, rdb: rdb, prefix: prefix, cluster: cluster}
}

func (f *fleet) nodesKey() string        { return f.prefix + ":{" + f.cluster + "}:nodes" }
func (f *fleet) clusterSlotsKey() string { return f.prefix + ":{" + f.cluster + "}:slots" }
func (f *fleet) appSlotsKey(app string) string {
	return f.prefix + ":{" + f.cluster + "}:slots:" + app
}

// instanceOf finds the fleet instance id of a gateway: ids are "<host>-<pid>-<random>".
func instanceOf(id string, g *gateway) bool {
	return strings.Contains(id, "-"+strconv.Itoa(g.pid())+"-")
}

// heartbeats returns the nodes set: instance id → last report (Redis time, µs).
func (f *fleet) heartbeats() (map[string]float64, error) {
	zs, err := f.rdb.ZRangeWithScores(context.Background(), f.nodesKey(), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	m := make(map[string]float64, len(zs))
	for _, z := range zs {
		m[z.Member.(string)] = z.Score
	}
	return m, nil
}

// redisNow is Redis TIME in µs, the clock of the heartbeats.
func (f *fleet) redisNow() float64 {
	f.t.Helper()
	tm, err := f.rdb.Time(context.Background()).Result()
	if err != nil {
		f.t.Fatalf("redis TIME: %v", err)
	}
	return float64(tm.UnixMicro())
}

// waitLive waits until every gateway has a heartbeat in the nodes set.
func (f *fleet) waitLive(gws ...*gateway) {
	f.t.Helper()
	f.waitReportsAfter(0, gws...)
}

// waitReportsAfter waits until every gateway has reported (heartbeat) after Redis time since.
func (f *fleet) waitReportsAfter(since float64, gws ...*gateway) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hb, err := f.heartbeats()
		done := err == nil
		for _, g := range gws {
			found := false
			for id, ts := range hb {
				if instanceOf(id, g) && ts > since {
					found = true
				}
			}
			done = done && found
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("gateways did not report after %.0f within 10 s (heartbeats %v, err %v)", since, hb, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sync waits until the gateways know each other's current state: a first round of reports
// after now writes every gateway's counts to Redis, a second round after that brings every
// gateway the others' counts in its report's reply. A report runs its cluster script (the
// heartbeat) before its app scripts in one pipeline, so a heartbeat after t means the whole
// report ran after t.
func (f *fleet) sync(gws ...*gateway) {
	f.t.Helper()
	for round := 0; round < 2; round++ {
		f.waitReportsAfter(f.redisNow(), gws...)
	}
}

// slotHoldings reads a slots hash: instance id → connection slots held.
func (f *fleet) slotHoldings(key string) map[string]int64 {
	f.t.Helper()
	m, err := f.rdb.HGetAll(context.Background(), key).Result()
	if err != nil {
		f.t.Fatalf("HGETALL %s: %v", key, err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		if i := strings.IndexByte(v, ':'); i >= 0 {
			v = v[:i]
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			f.t.Fatalf("HGETALL %s: %s=%q is not a number", key, k, v)
		}
		out[k] = int64(n)
	}
	return out
}

// rejection is the JSON body of a rejection.
type rejection struct {
	Error      string `json:"error"`
	Reason     string `json:"reason"`
	RetryAfter int64  `json:"retry_after"`
	Remaining  int64  `json:"remaining"`
	Cost       int64  `json:"cost"`
}

// parseRejection checks a rejection's status, content type and body, and returns the body.
func parseRejection(resp answer, body string) (rejection, error) {
	var r rejection
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return r, fmt.Errorf("status %d: Content-Type %q, want application/json (body %q)", resp.StatusCode, ct, body)
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return r, fmt.Errorf("status %d: body %q: %v", resp.StatusCode, body, err)
	}
	if r.Error != "rate_limit_exceeded" {
		return r, fmt.Errorf("status %d: error %q, want rate_limit_exceeded", resp.StatusCode, r.Error)
	}
	return r, nil
}

// newClient is an HTTP client for load: keep-alive connections, timeout as a safety net.
func newClient(t *testing.T, timeout time.Duration, conns int) *http.Client {
	tr := &http.Transport{
		MaxIdleConns: 4 * conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: 0,
		IdleConnTimeout: 30 * time.Second, DisableCompression: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// answer is the status and headers of a response whose body get has read and closed.
type answer struct {
	StatusCode int
	Header     http.Header
}

// get sends GET path for app through client and returns the response's status, headers and
// body, or an error.
func get(client *http.Client, base, path, app string) (answer, string, error) {
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		return answer{}, "", err
	}
	req.Header.Set("X-App-Id", app)
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, "", err
	}
	return answer{StatusCode: resp.StatusCode, Header: resp.Header}, drain(resp), nil
}
