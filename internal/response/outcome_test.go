package response

import (
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestOutcomeValueOverflow: values beyond the outcome's room are allocated, never lost,
// whatever room the outcome has (none, the one value of the draft header, a rejection's).
func TestOutcomeValueOverflow(t *testing.T) {
	rooms := []struct {
		name  string
		style Style
		res   Result
	}{
		{"headers off", Style{Headers: HeadersOff}, Result{}},
		{"default header", Style{Headers: HeadersDraft}, Result{}},
		{"rejection", Style{Headers: HeadersDraft}, Result{Decision: Rejected}},
	}
	for _, room := range rooms {
		t.Run(room.name, func(t *testing.T) {
			o := room.style.NewOutcome(&room.res)
			hdr := http.Header{}
			var want []string
			for i := 0; i < cap(o.vals)+3; i += maxFields {
				var f fields
				var b []byte
				for k := 0; k < maxFields; k++ {
					v := strings.Repeat(strconv.Itoa(i+k), 30+i+k)
					b = append(b, v...)
					f.built("H"+strconv.Itoa(i+k), len(b))
					want = append(want, v)
				}
				f.set(hdr, o, b)
			}
			for i, w := range want {
				v := hdr["H"+strconv.Itoa(i)]
				if len(v) != 1 || cap(v) != 1 || v[0] != w {
					t.Fatalf("value %d: %q (cap %d), want [%q] of cap 1", i, v, cap(v), w)
				}
			}
		})
	}
}

// TestMostFields: the most fields one response gets (headers both on an in-flight rejection,
// in the S3 format) fit in one set of fields.
func TestMostFields(t *testing.T) {
	s := Style{Headers: HeadersBoth, S3: true}
	res := Result{
		App: "a", Cost: 3, Limit: 10, Guaranteed: 1, Reason: store.ReasonAppLimitExceeded,
		Decision: Rejected, ConnLimit: 2, ConnCurrent: 2,
	}
	rec := newRecorder()
	out := s.Publish(rec, nil, &res)
	if err := s.Reject(rec, &http.Request{Method: http.MethodGet, ProtoMajor: 1, URL: mustURL("/b/k")}, out, false); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{
		hdrCost, hdrRemaining, hdrReset, hdrConnLimit, hdrConnCurrent, hdrConnRemain,
		hdrPolicy, hdrRateLimit, hdrRetryAfter, "X-Amz-Request-Id", "X-Amz-Retry-After", "Content-Type",
	} {
		if rec.hdr.Get(k) == "" {
			t.Errorf("%s missing", k)
		}
	}
}

// garbage keeps the heap moving between the providers.
var garbage []byte

// providers is a Placeholders that keeps what is registered, as Caddy's replacer does.
type providers struct{ fs []func(string) (any, bool) }

func (p *providers) Provide(f func(string) (any, bool)) { p.fs = append(p.fs, f) }

func (p *providers) Get(key string) (any, bool) {
	for _, f := range p.fs {
		if v, ok := f(key); ok {
			return v, true
		}
	}
	return nil, false
}

// TestPlaceholderProviderSurvivesGC: providers kept only by what the replacer holds keep their
// outcomes alive and answer with their own values, through garbage collections.
func TestPlaceholderProviderSurvivesGC(t *testing.T) {
	const n = 2000
	repls := make([]*providers, n)
	for i := range repls {
		repls[i] = new(providers)
		res := Result{App: "app-" + strconv.Itoa(i), Cost: int64(i)}
		Style{}.Publish(newRecorder(), repls[i], &res)
		garbage = make([]byte, 512)
	}
	runtime.GC()
	runtime.GC()
	for i, r := range repls {
		app, ok := r.Get(phPrefix + "app")
		cost, _ := r.Get(phPrefix + "cost")
		if !ok || app != "app-"+strconv.Itoa(i) || cost != strconv.Itoa(i) {
			t.Fatalf("provider %d answers app %v, cost %v", i, app, cost)
		}
		if v, ok := r.Get("http.rate_limit.unknown"); ok {
			t.Fatalf("provider %d answers a key not its own: %v", i, v)
		}
	}
}

type recorder struct {
	hdr    http.Header
	status int
	body   []byte
}

func newRecorder() *recorder                    { return &recorder{hdr: http.Header{}} }
func (r *recorder) Header() http.Header         { return r.hdr }
func (r *recorder) WriteHeader(code int)        { r.status = code }
func (r *recorder) Write(b []byte) (int, error) { r.body = append(r.body, b...); return len(b), nil }

func mustURL(path string) *url.URL { return &url.URL{Path: path} }
