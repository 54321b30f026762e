package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// selfSigned is a self-signed certificate (DER) and its key, valid for an hour, named cn (an IP
// address is also put in the certificate's IP addresses) for usage.
func selfSigned(t *testing.T, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// selfSignedServer is a certificate for 127.0.0.1 (PEM, for Caddy's load_pem) and a pool that
// trusts it (for the clients: TLS is verified).
func selfSignedServer(t *testing.T) (certPEM, keyPEM string, roots *x509.CertPool) {
	t.Helper()
	der, key := selfSigned(t, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})), roots
}

// TestHTTP3Requests: Caddy serves HTTP/3 on every HTTPS site by default, and browsers use it.
// A GET over HTTP/3 has no Content-Length and a body that ends at once, so it looks like a
// streaming body; it must cost its base (1), not the 16 tokens of stream_estimate up front:
// the twenty GETs of a burst of 20 are all admitted, a PUT is charged its body, and the headers
// (`headers draft`) show what is left.
func TestHTTP3Requests(t *testing.T) {
	certPEM, keyPEM, roots := selfSignedServer(t)
	site := `	rate_limit {
		cluster h3
		key {http.request.header.X-App-Id}
		headers draft
		app alpha {
			guaranteed 0.01
			burst 20
		}
	}
	request_body {
		max_size 1MB
	}
	respond "ok" 200`
	g := startGatewayJSON(t, "h3", site, func(cfg map[string]any) {
		httpApp := cfg["apps"].(map[string]any)["http"].(map[string]any)
		delete(httpApp, "http_port") // Caddy serves its HTTP port without TLS, whatever the policies
		servers := httpApp["servers"].(map[string]any)
		for _, srv := range servers {
			srv.(map[string]any)["tls_connection_policies"] = []any{map[string]any{}}
		}
		cfg["apps"].(map[string]any)["tls"] = map[string]any{
			"certificates": map[string]any{"load_pem": []any{map[string]any{"certificate": certPEM, "key": keyPEM}}},
		}
	})
	base := strings.Replace(g.base, "http://", "https://", 1)
	h3 := &http.Client{Transport: &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 10 * time.Second}
	defer h3.Transport.(*http3.Transport).Close()

	do := func(method, body string) (int, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, base+"/bucket/object", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-App-Id", "alpha")
		resp, err := h3.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 3 {
			t.Fatalf("%s went over %s, want HTTP/3", method, resp.Proto)
		}
		return resp.StatusCode, resp.Header
	}

	for i := 1; i <= 20; i++ {
		status, h := do("GET", "")
		if status != 200 {
			t.Fatalf("GET %d of a burst of 20 over HTTP/3: %d (RateLimit %q)", i, status, h.Get("RateLimit"))
		}
		if i == 1 && !strings.HasPrefix(h.Get("RateLimit"), `"app";r=19;`) {
			t.Errorf("first GET: RateLimit %q, want r=19 (a GET costs 1)", h.Get("RateLimit"))
		}
	}
	if status, _ := do("GET", ""); status != 429 {
		t.Fatalf("GET 21: %d, want 429", status)
	}
	g.waitMetric(5*time.Second, func(v float64) bool { return v == 20 }, "caddy_rate_limit_cost_total", `app="alpha"`)
}
