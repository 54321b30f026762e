package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// slowUpstream is a backend on loopback that holds every request until the test releases it
// (or the gateway gives up on it): the requests a gateway admits stay in flight.
type slowUpstream struct {
	srv      *httptest.Server
	mu       sync.Mutex
	release  chan struct{} // closed by releaseAll; hold makes a new one
	inflight atomic.Int64  // held now
	arrived  atomic.Int64  // ever
	byApp    sync.Map      // app id → *atomic.Int64 held now
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.appCount(r.Header.Get("X-App-Id"))
		n.Add(1)
		u.inflight.Add(1)
		u.arrived.Add(1)
		u.mu.Lock()
		release := u.release
		u.mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done(): // the gateway went away (killed) or gave up
		}
		n.Add(-1)
		u.inflight.Add(-1)
		w.Write([]byte("done"))
	}))
	t.Cleanup(func() {
		u.releaseAll()
		u.srv.Close()
	})
	return u
}

func (u *slowUpstream) appCount(app string) *atomic.Int64 {
	v, _ := u.byApp.LoadOrStore(app, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// held is the number of requests of app held now.
func (u *slowUpstream) held(app string) int64 { return u.appCount(app).Load() }

// releaseAll lets every held request (and every later one, until hold) complete.
func (u *slowUpstream) releaseAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

// hold makes requests arriving from now on wait again (after a releaseAll).
func (u *slowUpstream) hold() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.release:
		u.release = make(chan struct{})
	default:
	}
}

// hostPort is the upstream's address for reverse_proxy.
func (u *slowUpstream) hostPort() string { return strings.TrimPrefix(u.srv.URL, "http://") }
