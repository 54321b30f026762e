package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLS is a private PKI made for one test: a CA, a server certificate it signed (for
// 127.0.0.1, localhost and redis.test) and a client certificate it signed, as PEM files.
type TLS struct {
	CAFile, CertFile, KeyFile string // the CA; the server's certificate and key
	ClientCert, ClientKey     string // a client certificate signed by the CA, and its key
	CAPEM                     []byte // the CA certificate
	AuthClients               bool   // the server requires a client certificate (tls-auth-clients yes)
	ca                        *x509.Certificate
	caKey                     *ecdsa.PrivateKey
	dir                       string
}

// NewTLS generates a CA and certificates in dir. The server's certificate names 127.0.0.1,
// localhost and redis.test.
func NewTLS(t testing.TB, dir string) *TLS {
	t.Helper()
	p := &TLS{dir: dir}
	var err error
	p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tierbucket test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.CAFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p.CAFile, p.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	p.CertFile, p.KeyFile = p.issue(t, "server", []string{"localhost", "redis.test"},
		[]net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	p.ClientCert, p.ClientKey = p.issue(t, "client", nil, nil, x509.ExtKeyUsageClientAuth)
	return p
}

// issue writes a certificate signed by the CA, and its key, as <name>.pem and <name>-key.pem.
// (The server's certificate is also a client certificate: cluster nodes dial each other.)
func (p *TLS) issue(t testing.TB, name string, dns []string, ips []net.IP, usage ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "tierbucket test " + name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(p.dir, name+".pem")
	keyFile = filepath.Join(p.dir, name+"-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// CertPool returns a pool holding the CA.
func (p *TLS) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return pool
}

func (p *TLS) serverArgs(tlsPort int, cluster bool) []string {
	auth := "no"
	if p.AuthClients {
		auth = "yes"
	}
	args := []string{
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", p.CertFile, "--tls-key-file", p.KeyFile,
		"--tls-ca-cert-file", p.CAFile, "--tls-auth-clients", auth,
	}
	if cluster {
		args = append(args, "--tls-cluster", "yes", "--tls-replication", "yes")
	}
	return args
}

// cliArgs are redis-cli's arguments to connect to the TLS port.
func (p *TLS) cliArgs() []string {
	return []string{"--tls", "--cacert", p.CAFile, "--cert", p.CertFile, "--key", p.KeyFile}
}

// TLSAddr is the server's TLS host:port.
func (s *Server) TLSAddr() string { return "127.0.0.1:" + strconv.Itoa(s.TLSPort) }

// TLSAddrs returns the nodes' TLS addresses.
func TLSAddrs(nodes []*Server) []string {
	out := make([]string, len(nodes))
	for i, s := range nodes {
		out[i] = s.TLSAddr()
	}
	return out
}

// StandaloneWith starts a standalone server for this test with TLS (if p is not nil) and more
// redis-server arguments (such as "--user", "<ACL rule>"), and stops it at t.Cleanup.
func StandaloneWith(t testing.TB, p *TLS, extra ...string) *Server {
	t.Helper()
	Require(t)
	s, err := startIn(t.TempDir(), serverOpts{tls: p, extra: extra, nodeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
