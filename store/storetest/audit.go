package storetest

import (
	"context"
	"fmt"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// The audit log (Store.AppendAudit, Audit): opaque entries, newest first, bounded, per cluster.

func auditCases() []testCase {
	return []testCase{
		{"AuditNewestFirst", auditNewestFirst},
		{"AuditBounded", auditBounded},
		{"AuditInvalidEntry", auditInvalidEntry},
	}
}

func (e *env) audit(limit int) []string {
	e.t.Helper()
	entries, err := e.s.Audit(context.Background(), e.cluster.ID, limit)
	if err != nil {
		e.t.Fatalf("Audit(%d): %v", limit, err)
	}
	out := make([]string, len(entries))
	for i, b := range entries {
		out[i] = string(b)
	}
	return out
}

func (e *env) appendAudit(entry string) {
	e.t.Helper()
	if err := e.s.AppendAudit(context.Background(), e.cluster.ID, []byte(entry)); err != nil {
		e.t.Fatalf("AppendAudit(%q): %v", entry, err)
	}
}

func auditNewestFirst(e *env) {
	if got := e.audit(10); len(got) != 0 {
		e.t.Fatalf("a new cluster's audit: %q", got)
	}
	for _, entry := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
		e.appendAudit(entry)
	}
	if got := fmt.Sprint(e.audit(10)); got != `[{"n":3} {"n":2} {"n":1}]` {
		e.t.Fatalf("audit(10) = %s, want the three newest first", got)
	}
	if got := fmt.Sprint(e.audit(2)); got != `[{"n":3} {"n":2}]` {
		e.t.Fatalf("audit(2) = %s", got)
	}
	if got := e.audit(0); len(got) != 0 {
		e.t.Fatalf("audit(0) = %q, want none", got)
	}
	other, err := e.s.Audit(context.Background(), e.cluster.ID+"-other", 10)
	if err != nil || len(other) != 0 {
		e.t.Fatalf("another cluster's audit: %q %v", other, err)
	}
}

func auditBounded(e *env) {
	n := store.MaxAuditEntries + 5
	for i := range n {
		e.appendAudit(fmt.Sprint(i))
	}
	got := e.audit(store.MaxAuditEntries * 2)
	if len(got) != store.MaxAuditEntries || got[0] != fmt.Sprint(n-1) || got[len(got)-1] != fmt.Sprint(n-store.MaxAuditEntries) {
		e.t.Fatalf("after %d entries: %d kept, newest %s, oldest %s; want the newest %d",
			n, len(got), got[0], got[len(got)-1], store.MaxAuditEntries)
	}
}

func auditInvalidEntry(e *env) {
	for _, entry := range [][]byte{nil, make([]byte, store.MaxAuditEntrySize+1)} {
		if err := e.s.AppendAudit(context.Background(), e.cluster.ID, entry); err == nil {
			e.t.Fatalf("AppendAudit accepted a %d-byte entry", len(entry))
		}
	}
	if got := e.audit(10); len(got) != 0 {
		e.t.Fatalf("a refused entry is in the audit: %q", got)
	}
}
