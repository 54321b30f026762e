package cost

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// countObjects counts the objects of body read in chunks of the given sizes (cycled).
func countObjects(body []byte, chunks ...int) int64 {
	var s objectCounter
	for i := 0; len(body) > 0; i++ {
		n := len(body)
		if len(chunks) > 0 {
			n = min(max(chunks[i%len(chunks)], 1), len(body))
		}
		s.scan(body[:n])
		body = body[n:]
	}
	return s.Count()
}

// xmlObjects counts the <Object> start elements of body as encoding/xml (the parser MinIO
// uses) sees them; ok is false for a body that is not well-formed XML.
func xmlObjects(body []byte) (n int64, ok bool) {
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = true
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return n, true
		}
		if err != nil {
			return n, false
		}
		if se, isStart := tok.(xml.StartElement); isStart && se.Name.Local == "Object" {
			n++
		}
	}
}

func TestObjectCounter(t *testing.T) {
	awsCLI := `<?xml version="1.0" encoding="UTF-8"?>
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a/1</Key></Object><Object><Key>a/2</Key><VersionId>v</VersionId></Object><Quiet>true</Quiet></Delete>`
	tests := []struct {
		name, body string
		want       int64
	}{
		{"aws-cli", awsCLI, 2},
		{"namespace prefix", `<s3:Delete xmlns:s3="x"><s3:Object><s3:Key>k</s3:Key></s3:Object></s3:Delete>`, 1},
		{"whitespace in tags", "<Delete><Object ><Key>k</Key></Object><Object\n\t><Key>j</Key></Object\n></Delete>", 2},
		{"empty element", `<Delete><Object/><Object /></Delete>`, 2},
		{"attributes", `<Delete><Object a="1"><Key>k</Key></Object></Delete>`, 1},
		{"other names", `<Objects><ObjectX><xObject><Obj><bject><Object:x><Delete></Delete>`, 0},
		{"closing tags only", `</Object></Object>`, 0},
		{"a key naming the tag", `<Delete><Object><Key>&lt;Object&gt;</Key></Object></Delete>`, 1},
		{"comment counts (charged, never free)", `<Delete><!-- <Object> --></Delete>`, 1},
		{"empty", ``, 0},
		{"not XML", `Object Object <<Object>`, 1}, //nolint:dupword // the repeated word is the input under test
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{len(tt.body), 1, 2, 3, 7} {
				if got := countObjects([]byte(tt.body), chunk); got != tt.want {
					t.Errorf("read %d bytes at a time: %d objects, want %d", chunk, got, tt.want)
				}
			}
		})
	}
}

// Every object of a well-formed DeleteObjects list is counted, however the list is written
// (namespace prefixes, whitespace, keys that look like tags) and however it is read.
func TestPropertyObjectCounter(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		prefix := rapid.SampledFrom([]string{"", "s3:", "a.b-c_1:"}).Draw(t, "prefix")
		space := rapid.SampledFrom([]string{"", " ", "\n\t", "\r\n "}).Draw(t, "space")
		n := rapid.IntRange(0, 60).Draw(t, "objects")
		var b strings.Builder
		fmt.Fprintf(&b, `<?xml version="1.0"?><%sDelete xmlns%s="http://s3.amazonaws.com/doc/2006-03-01/">`,
			prefix, strings.TrimSuffix(":"+prefix, ":"))
		for i := range n {
			key := rapid.SampledFrom([]string{"k", "&lt;Object&gt;", "a/b c", "<![CDATA[x]]>", "Object"}).Draw(t, "key")
			fmt.Fprintf(&b, "<%sObject%s><%sKey>%s</%sKey>", prefix, space, prefix, key, prefix)
			if i%3 == 0 {
				fmt.Fprintf(&b, "<%sVersionId>v%d</%sVersionId>", prefix, i, prefix)
			}
			fmt.Fprintf(&b, "</%sObject%s>", prefix, space)
		}
		fmt.Fprintf(&b, "<%sQuiet>true</%sQuiet></%sDelete>", prefix, prefix, prefix)
		body := []byte(b.String())
		if got, ok := xmlObjects(body); !ok || got != int64(n) {
			t.Fatalf("the generated list is not what it should be: %d objects (well-formed %v), want %d\n%s", got, ok, n, body)
		}
		chunks := rapid.SliceOfN(rapid.IntRange(1, 64), 1, 8).Draw(t, "chunks")
		if got := countObjects(body, chunks...); got != int64(n) {
			t.Fatalf("counted %d objects, want %d (chunks %v)\n%s", got, n, chunks, body)
		}
	})
}

// FuzzObjectCounter: how a body is read never changes the count, and no well-formed XML hides
// an <Object> element from the counter.
func FuzzObjectCounter(f *testing.F) {
	f.Add([]byte(`<Delete><Object><Key>k</Key></Object></Delete>`), uint8(3))
	f.Add([]byte(`<a:Object/><!--<Object>--><![CDATA[<Object>]]>`), uint8(1))
	f.Add([]byte("<Object\n><Object\t/></Object>"), uint8(5))
	f.Fuzz(func(t *testing.T, body []byte, chunk uint8) {
		whole := countObjects(body)
		if split := countObjects(body, int(chunk)); split != whole {
			t.Fatalf("read whole: %d, in chunks of %d: %d", whole, chunk, split)
		}
		if n, ok := xmlObjects(body); ok && whole < n {
			t.Fatalf("encoding/xml sees %d <Object> elements, the counter %d", n, whole)
		}
	})
}
