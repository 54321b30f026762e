package response

import "net/http"

// maxFields is the most header fields one response gets from this package in one go: the
// legacy fields with the in-flight ones, the draft fields and Retry-After (headers both, on an
// in-flight rejection) are 9.
const maxFields = 12

// fields collects header fields and sets them in one go. The values are built one after the
// other in a byte buffer of the caller's (on its stack: it is kept apart from fields, whose
// names go into the header map) and become one string, so a response's built values cost one
// allocation together; each value is a substring of it. Constant values cost nothing. The
// []string the header map holds are cut from the outcome's room (a later handler, a deferred
// `header` replace, may rewrite header values in place, so they are never shared between
// requests).
type fields struct {
	n      int
	names  [maxFields]string
	ends   [maxFields]int // the end in the buffer of a built value; -1 for a constant
	consts [maxFields]string
}

// built ends the value built in the buffer up to end, as the value of name.
func (f *fields) built(name string, end int) {
	f.names[f.n], f.ends[f.n] = name, end
	f.n++
}

// constant adds name with the constant value v.
func (f *fields) constant(name, v string) {
	f.names[f.n], f.ends[f.n], f.consts[f.n] = name, -1, v
	f.n++
}

// set sets every field in hdr, the built ones from buf, with their value slices from o's room.
func (f *fields) set(hdr http.Header, o *Outcome, buf []byte) {
	var s string
	if len(buf) > 0 {
		s = string(buf)
	}
	start := 0
	for i := range f.n {
		v := f.consts[i]
		if end := f.ends[i]; end >= 0 {
			v, start = s[start:end], end
		}
		hdr[f.names[i]] = o.slot(v)
	}
}

// slot returns a one-element slice holding v, from o's room while there is room (cap 1, so that
// a later Header().Add copies instead of writing into the room).
func (o *Outcome) slot(v string) []string {
	if len(o.vals) == cap(o.vals) {
		return []string{v}
	}
	o.vals = append(o.vals, v)
	n := len(o.vals)
	return o.vals[n-1 : n : n]
}
