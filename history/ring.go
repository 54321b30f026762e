package history

// ring holds the last Window values pushed, allocated once.
type ring[T any] struct {
	buf   []T
	start int // index of the oldest value once the ring is full
}

func newRing[T any]() ring[T] { return ring[T]{buf: make([]T, 0, Window)} }

func (r *ring[T]) push(v T) {
	if len(r.buf) < Window {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.start] = v
	r.start = (r.start + 1) % Window
}

func (r *ring[T]) len() int { return len(r.buf) }

// at returns the i-th value, 0 = the oldest.
func (r *ring[T]) at(i int) *T { return &r.buf[(r.start+i)%len(r.buf)] }

// last returns the newest value, nil when empty.
func (r *ring[T]) last() *T {
	if len(r.buf) == 0 {
		return nil
	}
	return r.at(len(r.buf) - 1)
}
