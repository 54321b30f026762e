package cost

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func mustNew(t testing.TB, c Config) *Model {
	t.Helper()
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func req(method, target string, hdr ...string) *http.Request {
	r := httptest.NewRequest("GET", target, nil)
	r.Method = method // keep odd methods ("get", "BREW") as sent
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

func TestClassify(t *testing.T) {
	s3 := mustNew(t, Config{})
	plain := mustNew(t, Config{Operations: "http"})
	copySrc := []string{"x-amz-copy-source", "/src/obj"}
	tests := []struct {
		name         string
		r            *http.Request
		s3, httpMode Operation
	}{
		{"GET object", req("GET", "/b/k"), OpGet, OpGet},
		{"GET nested key", req("GET", "/b/dir/k.txt"), OpGet, OpGet},
		{"GET root lists", req("GET", "/"), OpList, OpGet},
		{"GET bucket lists", req("GET", "/b"), OpList, OpGet},
		{"GET bucket slash lists", req("GET", "/b/"), OpList, OpGet},
		{"GET list-type", req("GET", "/b/k?list-type=2"), OpList, OpGet},
		{"GET prefix", req("GET", "/b/k?x=1&prefix=a"), OpList, OpGet},
		{"GET delimiter no value", req("GET", "/b/k?delimiter"), OpList, OpGet},
		{"GET prefix only as value", req("GET", "/b/k?x=prefix"), OpGet, OpGet},
		{"GET key named prefix-ish", req("GET", "/b/k?prefixes=1"), OpGet, OpGet},
		{"GET other query", req("GET", "/b/k?versionId=3"), OpGet, OpGet},
		{"lowercase get", req("get", "/b/k"), OpGet, OpGet},
		{"empty method is GET", req("", "/b/k"), OpGet, OpGet},
		{"HEAD object", req("HEAD", "/b/k"), OpHead, OpHead},
		{"HEAD bucket stays HEAD", req("HEAD", "/b"), OpHead, OpHead},
		{"PUT object", req("PUT", "/b/k"), OpPut, OpPut},
		{"PUT copy", req("PUT", "/b/k", copySrc...), OpCopy, OpPut},
		{"PUT part", req("PUT", "/b/k?partNumber=1&uploadId=abc"), OpMultipartUpload, OpPut},
		{"PUT part reversed", req("PUT", "/b/k?uploadId=abc&partNumber=2"), OpMultipartUpload, OpPut},
		{"PUT part copy is COPY", req("PUT", "/b/k?partNumber=1&uploadId=abc", copySrc...), OpCopy, OpPut},
		{"PUT partNumber alone", req("PUT", "/b/k?partNumber=1"), OpPut, OpPut},
		{"PUT uploadId alone", req("PUT", "/b/k?uploadId=abc"), OpPut, OpPut},
		{"PUT key case matters", req("PUT", "/b/k?partnumber=1&uploadid=abc"), OpPut, OpPut},
		{"lowercase put", req("put", "/b/k"), OpPut, OpPut},
		{"POST object", req("POST", "/b/k"), OpPost, OpPost},
		{"POST uploads", req("POST", "/b/k?uploads"), OpMultipartInit, OpPost},
		{"POST uploads=", req("POST", "/b/k?uploads="), OpMultipartInit, OpPost},
		{"POST uploadId", req("POST", "/b/k?uploadId=abc"), OpMultipartComplete, OpPost},
		{"POST uploads wins", req("POST", "/b/k?uploadId=abc&uploads"), OpMultipartInit, OpPost},
		{"POST delete", req("POST", "/b?delete"), OpDeleteObjects, OpPost},
		{"POST delete=", req("POST", "/b?delete="), OpDeleteObjects, OpPost},
		{"POST deleted is POST", req("POST", "/b?deleted"), OpPost, OpPost},
		{"POST Delete case matters", req("POST", "/b?Delete"), OpPost, OpPost},
		{"DELETE object", req("DELETE", "/b/k"), OpDelete, OpDelete},
		{"DELETE uploadId", req("DELETE", "/b/k?uploadId=abc"), OpMultipartAbort, OpDelete},
		{"PATCH", req("PATCH", "/b/k"), OpPatch, OpPatch},
		{"OPTIONS is OTHER", req("OPTIONS", "/b/k"), OpOther, OpOther},
		{"BREW is OTHER", req("BREW", "/b/k?uploads"), OpOther, OpOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s3.Classify(tt.r); got != tt.s3 {
				t.Errorf("s3: got %v, want %v", got, tt.s3)
			}
			if got := plain.Classify(tt.r); got != tt.httpMode {
				t.Errorf("http: got %v, want %v", got, tt.httpMode)
			}
		})
	}
}

func TestOperationNames(t *testing.T) {
	for i := 0; i < NumOperations; i++ {
		op := Operation(i)
		for _, s := range []string{op.String(), strings.ToLower(op.String())} {
			got, ok := ParseOperation(s)
			if !ok || got != op {
				t.Errorf("ParseOperation(%q) = %v, %v; want %v", s, got, ok, op)
			}
		}
	}
	if _, ok := ParseOperation("FOO"); ok {
		t.Error("ParseOperation(FOO) succeeded")
	}
	if OpMultipartInit.String() != "MULTIPART_INIT" || Operation(200).String() != "OTHER" {
		t.Errorf("String: %q %q", OpMultipartInit, Operation(200))
	}
}

func TestBaseTable(t *testing.T) {
	want := map[Operation]int64{
		OpGet: 1, OpHead: 1, OpPut: 5, OpPost: 5, OpPatch: 3, OpDelete: 2,
		OpList: 3, OpCopy: 6, OpMultipartInit: 2, OpMultipartUpload: 4, OpMultipartComplete: 8,
		OpMultipartAbort: 3, OpOther: 1,
	}
	m := mustNew(t, Config{})
	for op, b := range want {
		if got := m.Cost(op, 0); got != b {
			t.Errorf("base %v = %d, want %d", op, got, b)
		}
	}
	m = mustNew(t, Config{Default: Int(7), Base: map[string]int64{"get": 0, "Multipart_Upload": 40}})
	if m.Cost(OpGet, 0) != 0 || m.Cost(OpMultipartUpload, 0) != 40 || m.Cost(OpOther, 0) != 7 || m.Cost(OpPut, 0) != 5 {
		t.Errorf("overrides: GET %d MPU %d OTHER %d PUT %d", m.Cost(OpGet, 0), m.Cost(OpMultipartUpload, 0), m.Cost(OpOther, 0), m.Cost(OpPut, 0))
	}
	if m := mustNew(t, Config{Default: Int(7), Base: map[string]int64{"OTHER": 9}}); m.Cost(OpOther, 0) != 9 {
		t.Errorf("base OTHER should win over default, got %d", m.Cost(OpOther, 0))
	}
}
