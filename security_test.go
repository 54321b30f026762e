package tierbucket

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// TestRedisTLSFromJSON: the JSON names of the TLS options, with Caddy's inline CA pool module,
// a client certificate and an {env.*} password, against a real TLS Redis that requires client
// certificates, as the least-privilege ACL user: the handler leases from Redis.
func TestRedisTLSFromJSON(t *testing.T) {
	p := redistest.NewTLS(t, t.TempDir())
	p.AuthClients = true
	srv := redistest.StandaloneWith(t, p)
	srv.SetUser(t, "gw", "json-secret-pw", redislua.ACLRules("jsontls"))
	t.Setenv("TIERBUCKET_TEST_REDIS_PW", "json-secret-pw")
	block, _ := pem.Decode(p.CAPEM)
	raw := fmt.Sprintf(`{
		"cluster": "json-tls",
		"key": "{http.request.header.X-App-Id}",
		"apps": {"a": {"guaranteed": 0.001, "burst": 2}},
		"redis": {
			"address": [%q],
			"username": "gw",
			"password": "{env.TIERBUCKET_TEST_REDIS_PW}",
			"key_prefix": "jsontls",
			"tls_trust_pool": {"provider": "inline", "trusted_ca_certs": [%q]},
			"tls_client_auth": {"certificate_file": %q, "key_file": %q},
			"tls_server_name": "redis.test"
		}
	}`, srv.TLSAddr(), base64.StdEncoding.EncodeToString(block.Bytes), p.ClientCert, p.ClientKey)
	h := new(Handler)
	if err := json.Unmarshal([]byte(raw), h); err != nil {
		t.Fatal(err)
	}
	newTestHandler(t, h)
	var codes []int
	for range 3 {
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, get("a"), nopNext); err != nil {
			t.Fatal(err)
		}
		codes = append(codes, w.Code)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("codes %v, want the burst of 2 enforced through Redis", codes)
	}
	n, err := srv.Do("EXISTS", "jsontls:{json-tls/a}:l2")
	if err != nil || n != int64(1) {
		t.Fatalf("the app's L2 key in Redis: %v %v", n, err)
	}
	// The handler's config keeps the placeholder and the module, never the password.
	b, _ := json.Marshal(h)
	if strings.Contains(string(b), "json-secret-pw") || !strings.Contains(string(b), `"provider":"inline"`) {
		t.Fatalf("handler JSON: %s", b)
	}
}
