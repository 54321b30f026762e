package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// The audit log (docs/admin-api.md, "Audit"): every change made through the admin API is
// recorded in the cluster's fleet-wide log in the Store, so any instance shows who changed
// what, where and when.
//
//	GET /rate_limit/audit?limit=N   AuditView

// AuditEntry is one change as the audit log keeps it.
type AuditEntry struct {
	Time     time.Time `json:"time"`
	Instance string    `json:"instance"`    // the instance whose admin API took the change
	Remote   string    `json:"remote_addr"` // the client's address
	// ClientSubject is the subject of the client's certificate when the admin endpoint
	// authenticates clients with TLS (admin.remote); empty otherwise.
	ClientSubject string         `json:"client_subject,omitempty"`
	Route         string         `json:"route"`  // method and path: "PUT /rate_limit/apps/alpha"
	Change        string         `json:"change"` // as in the log and the event: app_override_set, emergency_activate, …
	Details       map[string]any `json:"details,omitempty"`
	Before        any            `json:"before"`
	After         any            `json:"after"`
}

// AuditView is GET /rate_limit/audit.
type AuditView struct {
	Cluster string            `json:"cluster"`
	Entries []json.RawMessage `json:"entries"` // AuditEntry, newest first
}

// defaultAuditLimit is the number of entries GET /rate_limit/audit answers without ?limit=.
const defaultAuditLimit = 100

// record adds a change to the cluster's audit log. The change is done whatever happens here:
// a Store that fails to record it is logged (and counted as a Store error), not answered as a
// failed change.
func (a API) record(r *http.Request, c Cluster, change string, details map[string]any, before, after any) {
	e := AuditEntry{
		Time: time.Now().UTC(), Instance: c.Limiter().Config().Instance, Remote: r.RemoteAddr,
		Route: r.Method + " " + r.URL.Path, Change: change, Details: details, Before: before, After: after,
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		e.ClientSubject = r.TLS.PeerCertificates[0].Subject.String()
	}
	b, err := json.Marshal(e)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), setTimeout)
		defer cancel()
		err = c.Limiter().AppendAudit(ctx, b)
	}
	if err != nil {
		a.log().Warn("rate_limit: the change is applied but not recorded in the audit log",
			zap.String("cluster", c.ID()), zap.String("change", change), zap.Error(err))
	}
}

// auditView is GET /rate_limit/audit.
func auditView(r *http.Request, c Cluster) (any, error) {
	limit, err := auditLimit(r.URL.Query())
	if err != nil {
		return nil, err
	}
	entries, err := c.Limiter().Audit(r.Context(), limit)
	if err != nil {
		return nil, storeFailure("cluster "+strconv.Quote(c.ID())+": reading the audit log", err, "try again")
	}
	v := AuditView{Cluster: c.ID(), Entries: make([]json.RawMessage, 0, len(entries))}
	for _, b := range entries {
		if json.Valid(b) {
			v.Entries = append(v.Entries, b)
		}
	}
	return v, nil
}

func auditLimit(q url.Values) (int, error) {
	if !q.Has("limit") {
		return defaultAuditLimit, nil
	}
	s := q.Get("limit")
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > store.MaxAuditEntries || s[0] == '+' || len(q["limit"]) > 1 {
		return 0, apiError(http.StatusBadRequest, "limit: must be a whole number from 1 to %d, given once, got %q",
			store.MaxAuditEntries, s)
	}
	return n, nil
}
