package cost

import (
	"bytes"
	"sync/atomic"
)

// MaxDeleteObjects is the most objects one S3 DeleteObjects request may name: S3, MinIO and
// Ceph RGW refuse a longer list as a whole, so more are never charged.
const MaxDeleteObjects = 1000

// minObjectXML is the length of the shortest entry of a DeleteObjects list that names an
// object, <Object><Key>k</Key></Object>: a body of n bytes names at most n / minObjectXML.
const minObjectXML = len("<Object><Key>k</Key></Object>")

// objectTag is the local name of the element a DeleteObjects body has per object.
const objectTag = "Object"

// objectCounter counts the <Object> elements of an S3 DeleteObjects body as it streams by, so
// that a bulk delete is charged per object deleted. It reads the XML only as far as tag names:
// an element's name cannot be escaped or split by anything but a namespace prefix, which it
// skips (<s3:Object> counts), so valid XML cannot hide an object from it; an <Object> inside a
// comment or CDATA counts too (charged, never free). Scan is called by one reader at a time;
// Count may be called from any goroutine.
type objectCounter struct {
	inName bool // inside a tag name (after '<')
	local  int  // bytes of the name's local part so far (after its last ':')
	match  bool // the local part so far is a prefix of objectTag
	n      atomic.Int64
}

// reset starts a new body.
func (s *objectCounter) reset() {
	s.inName, s.local, s.match = false, 0, false
	s.n.Store(0)
}

// Count returns the <Object> elements seen so far.
func (s *objectCounter) Count() int64 { return s.n.Load() }

// scan counts the elements that start in p (a tag name may continue from the previous p).
func (s *objectCounter) scan(p []byte) {
	for len(p) > 0 {
		if !s.inName {
			i := bytes.IndexByte(p, '<')
			if i < 0 {
				return
			}
			s.inName, s.local, s.match = true, 0, true
			p = p[i+1:]
			continue
		}
		c := p[0]
		p = p[1:]
		switch c {
		case ' ', '\t', '\r', '\n', '>', '/':
			// The name ended (a '/' first is a closing tag: an empty name).
			if s.match && s.local == len(objectTag) {
				s.n.Add(1)
			}
			s.inName = false
		case ':':
			s.local, s.match = 0, true // a namespace prefix: the local name starts after it
		case '<':
			s.local, s.match = 0, true // not XML; start over
		default:
			if s.match && s.local < len(objectTag) && c == objectTag[s.local] {
				s.local++
			} else {
				s.match = false
			}
		}
	}
}
