package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// clientIdentity is a self-signed client certificate: what admin.remote's access_control lists.
type clientIdentity struct {
	cert tls.Certificate
	b64  string // the certificate's DER, base64: an access_control public key
}

func newClientIdentity(t *testing.T, name string) clientIdentity {
	t.Helper()
	der, key := selfSigned(t, name, x509.ExtKeyUsageClientAuth)
	return clientIdentity{
		cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		b64:  base64.StdEncoding.EncodeToString(der),
	}
}

// TestRemoteAdminAccessControl: the plugin's routes live under Caddy's own protections. With
// admin.remote (mutual TLS) an identity allowed only GET on /rate_limit/ reads the live state,
// and Caddy refuses its PUT and POST before the plugin sees them: nothing changes. An identity
// allowed every method on /rate_limit/ may change a policy. Through the same endpoint the
// mutating routes take only JSON (415) with bounded bodies (413) and a bounded reason.
func TestRemoteAdminAccessControl(t *testing.T) {
	reader, operator := newClientIdentity(t, "reader"), newClientIdentity(t, "operator")
	remotePort := testnet.FreePort(t)
	site := `	rate_limit {
		cluster remote
		key {http.request.header.X-App-Id}
		app a {
			guaranteed 100
			burst 100
		}
	}
	respond "ok" 200`
	g := startGatewayJSON(t, "remote", site, func(cfg map[string]any) {
		admin := cfg["admin"].(map[string]any)
		admin["identity"] = map[string]any{
			"identifiers": []string{"127.0.0.1"},
			"issuers":     []any{map[string]any{"module": "internal"}},
		}
		admin["remote"] = map[string]any{
			"listen": fmt.Sprintf("127.0.0.1:%d", remotePort),
			"access_control": []any{
				map[string]any{
					"public_keys": []string{reader.b64},
					"permissions": []any{map[string]any{"paths": []string{"/rate_limit/"}, "methods": []string{"GET"}}},
				},
				map[string]any{
					"public_keys": []string{operator.b64},
					"permissions": []any{map[string]any{"paths": []string{"/rate_limit/"}}},
				},
			},
		}
	})

	// Caddy's internal CA signed the remote endpoint's certificate: verify it with that root.
	roots := x509.NewCertPool()
	var ca struct {
		Root string `json:"root_certificate"`
	}
	if err := json.Unmarshal([]byte(adminBody(t, g, "/pki/ca/local")), &ca); err != nil || !roots.AppendCertsFromPEM([]byte(ca.Root)) {
		t.Fatalf("Caddy's local CA root: %v %q", err, ca.Root)
	}
	remote := fmt.Sprintf("https://127.0.0.1:%d", remotePort)
	clientFor := func(id clientIdentity) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: roots, Certificates: []tls.Certificate{id.cert}, ServerName: "127.0.0.1",
		}}}
	}
	do := func(c *http.Client, method, path, ctype, body string) (int, string) {
		t.Helper()
		var resp *http.Response
		var err error
		for range 50 { // the remote endpoint starts once its identity certificate is issued
			req, _ := http.NewRequest(method, remote+path, strings.NewReader(body))
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			if resp, err = c.Do(req); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	before := appPolicy(t, g, "a")

	readerClient := clientFor(reader)
	if code, body := do(readerClient, "GET", "/rate_limit/apps", "", ""); code != 200 || !strings.Contains(body, `"a"`) {
		t.Fatalf("reader GET /rate_limit/apps: %d %s", code, body)
	}
	for _, r := range []struct{ method, path, body string }{
		{"PUT", "/rate_limit/apps/a", `{"guaranteed":1,"burst":1}`},
		{"POST", "/rate_limit/emergency/activate", `{"reason":"reader","duration":"1m"}`},
		{"GET", "/config/", ""},
	} {
		if code, body := do(readerClient, r.method, r.path, "application/json", r.body); code != http.StatusForbidden {
			t.Errorf("reader %s %s: %d %s, want 403 from Caddy", r.method, r.path, code, body)
		}
	}
	if after := appPolicy(t, g, "a"); after != before {
		t.Fatalf("refused requests changed the app:\nbefore %s\nafter  %s", before, after)
	}
	if body := adminBody(t, g, "/rate_limit/emergency"); strings.Contains(body, `"active":true`) {
		t.Fatalf("a refused activation is active: %s", body)
	}

	opClient := clientFor(operator)
	// Only JSON, bounded bodies, a bounded reason: and nothing changes on a refusal.
	if code, _ := do(opClient, "PUT", "/rate_limit/apps/a", "text/plain", `{"guaranteed":5,"burst":5}`); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain PUT: %d, want 415", code)
	}
	big := `{"guaranteed":5,"burst":5,"pad":"` + strings.Repeat("x", 1<<20) + `"}`
	if code, _ := do(opClient, "PUT", "/rate_limit/apps/a", "application/json", big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("1 MiB PUT: %d, want 413", code)
	}
	long := fmt.Sprintf(`{"reason":%q,"duration":"1m"}`, strings.Repeat("r", 10000))
	if code, _ := do(opClient, "POST", "/rate_limit/emergency/activate", "application/json", long); code != http.StatusBadRequest {
		t.Errorf("a 10 000-character reason: %d, want 400", code)
	}
	if after := appPolicy(t, g, "a"); after != before {
		t.Fatalf("refused changes changed the app:\nbefore %s\nafter  %s", before, after)
	}
	if code, body := do(opClient, "PUT", "/rate_limit/apps/a", "application/json", `{"guaranteed":5,"burst":5}`); code != 200 {
		t.Fatalf("operator PUT: %d %s", code, body)
	}
	var app struct {
		Source string `json:"source"`
		Policy struct {
			Guaranteed float64 `json:"guaranteed"`
		} `json:"policy"`
	}
	if err := json.NewDecoder(bytes.NewReader([]byte(adminBody(t, g, "/rate_limit/apps/a")))).Decode(&app); err != nil ||
		app.Policy.Guaranteed != 5 {
		t.Fatalf("after the operator's PUT: %+v %v", app, err)
	}
}

// appPolicy is app's policy, source and override as the admin API shows them (not its live
// figures), for before/after comparisons.
func appPolicy(t *testing.T, g *gateway, app string) string {
	t.Helper()
	var v struct {
		Policy   json.RawMessage `json:"policy"`
		Source   string          `json:"source"`
		Override json.RawMessage `json:"override"`
	}
	body := adminBody(t, g, "/rate_limit/apps/"+app)
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET /rate_limit/apps/%s: %v: %s", app, err, body)
	}
	return fmt.Sprintf("%s %s %s", v.Policy, v.Source, v.Override)
}
