package redislua

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// A redis block without tls pointed at a TLS port fails like a Redis going down: the server
// reads the client's first command as a broken handshake and closes the connection (EOF, or a
// reset). The probe tells the two apart: when a server that accepted the connection closed it,
// it dials each address once more and starts a TLS handshake. A server that answers in TLS is
// a misconfiguration, reported as a permanent error (KindTLSRequired) with its remedy instead
// of an endless outage.

// closedByServer reports whether err says the server closed the connection it had accepted.
func closedByServer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// plainAddrs returns the addresses this Store dials without TLS: the standalone server, or the
// Cluster's seed nodes. None when TLS is configured, and none for Sentinel, whose client dials
// what the sentinels name.
func (s *Store) plainAddrs() []string {
	switch c := s.client.(type) {
	case *redis.Client:
		o := c.Options()
		if o.TLSConfig != nil || o.Addr == "FailoverClient" {
			return nil
		}
		return []string{o.Addr}
	case *redis.ClusterClient:
		if o := c.Options(); o.TLSConfig == nil {
			return o.Addrs
		}
	}
	return nil
}

// tlsRequired returns a *PermanentError when err is a connection the server closed and one of
// the addresses dialled without TLS answers a TLS handshake; nil otherwise.
func (s *Store) tlsRequired(ctx context.Context, err error) *PermanentError {
	if !closedByServer(err) {
		return nil
	}
	for _, addr := range s.plainAddrs() {
		if speaksTLS(ctx, addr) {
			return &PermanentError{Kind: KindTLSRequired, Err: fmt.Errorf(
				"%s closes plain connections and answers a TLS handshake: it is a TLS port, and the redis "+
					"block has no tls (%w)", addr, err)}
		}
	}
	return nil
}

// speaksTLS reports whether the server at addr answers a TLS handshake: it completes, or the
// server's certificate fails verification, or the server sends a TLS alert. Nothing is sent
// over the connection, which is closed at once; the certificate is verified as usual (a
// failure only proves that the server speaks TLS).
func speaksTLS(ctx context.Context, addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	d := tls.Dialer{Config: &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return true
	}
	var record tls.RecordHeaderError
	if errors.As(err, &record) {
		return false // what came back was not TLS
	}
	k, ok := permanentKind(err) // a certificate that fails verification, or the server's TLS alert
	return ok && (k == KindCertificate || k == KindTLS)
}
