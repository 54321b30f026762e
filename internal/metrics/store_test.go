package metrics

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode"

	dto "github.com/prometheus/client_model/go"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// failingStore fails every call that can fail.
type failingStore struct{}

var errDown = errors.New("down")

func (failingStore) AppendAudit(context.Context, string, []byte) error { return errDown }

func (failingStore) Audit(context.Context, string, int) ([][]byte, error) { return nil, errDown }

func (failingStore) Lease(context.Context, store.LeaseRequest) (store.Lease, error) {
	return store.Lease{}, errDown
}
func (failingStore) Return(context.Context, store.Return) error { return errDown }
func (failingStore) Report(context.Context, store.Report) (store.ClusterState, error) {
	return store.ClusterState{}, errDown
}

func (failingStore) SetEmergency(context.Context, store.ClusterPolicy, store.Emergency) error {
	return errDown
}

func (failingStore) Overrides(context.Context, string) (store.Overrides, error) {
	return store.Overrides{}, errDown
}

func (failingStore) SetOverride(context.Context, string, store.OverrideChange) (uint64, error) {
	return 0, errDown
}
func (failingStore) Watch(string, func()) func() { return func() {} }
func (failingStore) LeaseSlots(context.Context, store.SlotRequest) (store.SlotLease, error) {
	return store.SlotLease{}, errDown
}
func (failingStore) Close() error { return errDown }

// snake turns a method name into its op label: SetOverride → set_override.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// calls is the number of observed calls of cluster's op.
func calls(t *testing.T, cluster, op string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := storeLatency.WithLabelValues(cluster, op).(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func failures(t *testing.T, cluster, op string) float64 {
	t.Helper()
	var m dto.Metric
	if err := storeErrors.WithLabelValues(cluster, op).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestEveryStoreMethodIsObserved calls every method of the store.Store interface, found by
// reflection, through the wrapper: each must be timed under its own op label, and each that
// returns an error must count it.
func TestEveryStoreMethodIsObserved(t *testing.T) {
	const cluster = "metrics-every-method"
	defer ForgetStore(cluster)
	iface := reflect.TypeFor[store.Store]()
	w := reflect.ValueOf(NewStore(failingStore{}, cluster))
	if iface.NumMethod() != int(numOps) {
		t.Fatalf("store.Store has %d methods, the wrapper names %d ops", iface.NumMethod(), numOps)
	}
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		op := snake(m.Name)
		if !strings.Contains(strings.Join(opNames[:], ","), op) {
			t.Errorf("%s: no op %q", m.Name, op)
			continue
		}
		in := make([]reflect.Value, m.Type.NumIn())
		for j := range in {
			in[j] = reflect.Zero(m.Type.In(j))
			if m.Type.In(j) == reflect.TypeFor[context.Context]() {
				in[j] = reflect.ValueOf(context.Background())
			}
		}
		before, failedBefore := calls(t, cluster, op), failures(t, cluster, op)
		out := w.MethodByName(m.Name).Call(in)
		if got := calls(t, cluster, op); got != before+1 {
			t.Errorf("%s: %d calls observed, want 1", m.Name, got-before)
		}
		last := out[len(out)-1]
		if last.Type() == reflect.TypeFor[error]() {
			if last.IsNil() {
				t.Errorf("%s: the wrapper lost the Store's error", m.Name)
			}
			if got := failures(t, cluster, op); got != failedBefore+1 {
				t.Errorf("%s: %v failures counted, want 1", m.Name, got-failedBefore)
			}
		}
	}
}

// A version conflict or a full override table is an answer, not a failure of the Store.
func TestSetOverrideAnswersAreNotFailures(t *testing.T) {
	const cluster = "metrics-set-override"
	defer ForgetStore(cluster)
	for _, answer := range []error{store.ErrVersionConflict, store.ErrTooManyOverrides} {
		s := NewStore(answeringStore{failingStore{}, answer}, cluster)
		if _, err := s.SetOverride(context.Background(), cluster, store.OverrideChange{}); !errors.Is(err, answer) {
			t.Fatalf("got %v, want %v", err, answer)
		}
	}
	if n := failures(t, cluster, "set_override"); n != 0 {
		t.Errorf("%v failures counted, want 0", n)
	}
	if n := calls(t, cluster, "set_override"); n != 2 {
		t.Errorf("%d calls observed, want 2", n)
	}
}

type answeringStore struct {
	failingStore
	answer error
}

func (s answeringStore) SetOverride(context.Context, string, store.OverrideChange) (uint64, error) {
	return 0, s.answer
}
