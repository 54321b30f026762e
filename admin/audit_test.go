package admin

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// auditEntries is GET /rate_limit/audit decoded.
func auditEntries(t *testing.T, a API, target string) []AuditEntry {
	t.Helper()
	var v struct {
		Cluster string       `json:"cluster"`
		Entries []AuditEntry `json:"entries"`
	}
	get(t, a, target, &v)
	if v.Cluster != "c1" {
		t.Fatalf("audit of cluster %q", v.Cluster)
	}
	return v.Entries
}

// TestAuditRecordsEveryChange: overrides, enabling and the emergency through the API are in the
// cluster's audit log, newest first, with the instance, the client's address and certificate
// subject, the route, and the policy before and after; reads and refused changes are not.
func TestAuditRecordsEveryChange(t *testing.T) {
	c, _, a, _ := overrideCluster(t)
	if got := auditEntries(t, a, "/rate_limit/audit"); len(got) != 0 {
		t.Fatalf("audit before any change: %+v", got)
	}
	for _, ch := range []struct{ method, target, body string }{
		{http.MethodPut, "/rate_limit/apps/alpha", `{"guaranteed":2,"burst":10}`},
		{http.MethodPut, "/rate_limit/apps/alpha", `{"guaranteed":-1}`}, // refused: not recorded
		{http.MethodPut, "/rate_limit/apps/alpha", `{"enabled":false}`},
		{http.MethodDelete, "/rate_limit/apps/alpha", ""},
		{http.MethodPost, "/rate_limit/emergency/activate", `{"reason":"backend <migration>"}`},
		{http.MethodPut, "/rate_limit/clusters/c1", `{"capacity":2000}`},
	} {
		_, _ = send(a, ch.method, ch.target, ch.body)
	}

	// One change through a client with a certificate (admin.remote with mTLS).
	r := httptest.NewRequest(http.MethodPost, "/rate_limit/emergency/deactivate", nil)
	r.RemoteAddr = "198.51.100.9:443"
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "oncall", Organization: []string{"ops"}}}}}
	if err := a.Routes()[0].Handler.ServeHTTP(httptest.NewRecorder(), r); err != nil {
		t.Fatal(err)
	}

	got := auditEntries(t, a, "/rate_limit/audit")
	var changes []string
	for _, e := range got {
		changes = append(changes, e.Change+" "+e.Route)
	}
	want := []string{
		"emergency_deactivate POST /rate_limit/emergency/deactivate",
		"cluster_override_set PUT /rate_limit/clusters/c1",
		"emergency_activate POST /rate_limit/emergency/activate",
		"app_override_removed DELETE /rate_limit/apps/alpha",
		"app_override_set PUT /rate_limit/apps/alpha",
		"app_override_set PUT /rate_limit/apps/alpha",
	}
	if strings.Join(changes, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit, newest first:\n%s\nwant:\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
	}
	if e := got[0]; e.ClientSubject != "CN=oncall,O=ops" || e.Remote != "198.51.100.9:443" || e.Instance != c.Limiter().Config().Instance || e.Time.IsZero() {
		t.Errorf("the mTLS change: %+v", e)
	}
	disable := got[4]
	before, _ := json.Marshal(disable.Before)
	after, _ := json.Marshal(disable.After)
	if disable.Remote != "192.0.2.7:4711" || disable.ClientSubject != "" ||
		!strings.Contains(string(before), `"enabled":true`) || !strings.Contains(string(after), `"enabled":false`) ||
		!strings.Contains(string(after), `"guaranteed":2`) {
		t.Errorf("the disable: remote %s subject %q before %s after %s", disable.Remote, disable.ClientSubject, before, after)
	}
	if d, _ := json.Marshal(got[2].Details); !strings.Contains(string(d), `backend \u003cmigration\u003e`) {
		t.Errorf("the emergency's details %s: want the reason, as JSON text", d)
	}

	if got := auditEntries(t, a, "/rate_limit/audit?limit=2"); len(got) != 2 || got[0].Change != "emergency_deactivate" {
		t.Errorf("limit=2: %+v", got)
	}
	for _, bad := range []string{"0", "1001", "x", "+5", "5&limit=6"} {
		_, err := call(a, http.MethodGet, "/rate_limit/audit?limit="+bad)
		if msg := apiErr(t, err, http.StatusBadRequest); !strings.HasPrefix(msg, "limit: must be a whole number from 1 to 1000") {
			t.Errorf("limit=%s: %q", bad, msg)
		}
	}
}
