package redislua

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// ErrorKind names a class of permanent errors: Redis refused this client's configuration, and
// no retry can succeed until an operator changes it (the credentials, the user's ACL, the
// certificates).
type ErrorKind string

// The permanent error kinds.
const (
	KindAuth        ErrorKind = "authentication" // WRONGPASS, NOAUTH
	KindPermission  ErrorKind = "permission"     // NOPERM
	KindCertificate ErrorKind = "certificate"    // the server's certificate is not trusted or does not match
	KindTLS         ErrorKind = "tls"            // the TLS handshake failed (client certificate refused, TLS against a plain port)
	KindTLSRequired ErrorKind = "tls_required"   // a plain connection to a TLS port
	KindDatabase    ErrorKind = "database"       // SELECT refused: db is beyond the server's databases
	KindCluster     ErrorKind = "cluster"        // one address that is a Redis Cluster node (MOVED, ASK, CROSSSLOT)
)

// PermanentError is a Store error that retrying cannot fix; it implements
// store.PermanentError. Its message is the underlying error's (go-redis and crypto/tls never
// put a password or key material in one).
type PermanentError struct {
	Kind ErrorKind
	Err  error
	// Denied names the commands Store.CheckACL found refused (KindPermission), in the order
	// of ACLCommands; nil for an error of a call.
	Denied []string
}

func (e *PermanentError) Error() string   { return e.Err.Error() }
func (e *PermanentError) Unwrap() error   { return e.Err }
func (e *PermanentError) Permanent() bool { return true }

// Remedy says what the operator has to change.
func (e *PermanentError) Remedy() string {
	switch e.Kind {
	case KindAuth:
		if strings.Contains(e.Err.Error(), "sentinel") {
			return "the sentinels refused the connection: give their own credentials (their requirepass or ACL user) " +
				"with sentinel_password (and sentinel_username); username and password are the data nodes'"
		}
		return "check the redis block's username and password (or the url's credentials) against the Redis ACL user; " +
			"a placeholder such as {env.REDIS_PASSWORD} must be set in Caddy's environment"
	case KindPermission:
		return "grant the Redis ACL user the key pattern ~<key_prefix>:*, the channel pattern &<key_prefix>:* " +
			"and the command list in docs/security.md"
	case KindCertificate:
		return "give the CA that signed the Redis server's certificate with tls_trust_pool, and make sure the " +
			"certificate names the host dialled, or the tls_server_name given (set it to a name the certificate holds)"
	case KindCluster:
		return "the address is a node of a Redis Cluster: list two or more of its nodes in address, instead of one " +
			"address or a url (which mean a standalone Redis; with several addresses the limiter uses a Cluster client, " +
			"which follows the slots, on db 0)"
	case KindDatabase:
		return "set the redis block's db below the server's number of databases (its databases setting, 16 by default)"
	case KindTLSRequired:
		return "add tls to the redis block (with tls_trust_pool for a private CA), or point address at Redis' " +
			"plain port (its port setting; a Redis with port 0 has none)"
	case KindTLS:
		return "check that the address is Redis' TLS port, and, if Redis requires client certificates " +
			"(tls-auth-clients), that tls_client_auth names a certificate signed by a CA Redis trusts"
	}
	return "fix the redis block"
}

var _ store.PermanentError = (*PermanentError)(nil)

// classify returns err as a *PermanentError when it is one (Redis refused the credentials,
// the permissions or the certificates), otherwise err unchanged.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var p *PermanentError
	if errors.As(err, &p) {
		return err
	}
	if k, ok := permanentKind(err); ok {
		return &PermanentError{Kind: k, Err: err}
	}
	if msg := err.Error(); strings.Contains(msg, "all sentinels specified in configuration are unreachable") &&
		strings.Contains(msg, "redis: nil") {
		// go-redis' words when every sentinel answered that it knows no such master.
		return fmt.Errorf("the sentinels know no master by the name in sentinel (a wrong name, or sentinels "+
			"not monitoring it yet): %w", err)
	}
	return err
}

// classify is the package's classify plus what only a client that is not a Cluster client can
// meet: a redirection (MOVED, ASK) or CROSSSLOT means its one address is a node of a Redis
// Cluster, whose slots a standalone client cannot follow. (A Cluster client follows them; one
// that gives up after its redirects is in a migration, a transient state.)
func (s *Store) classify(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := s.client.(*redis.ClusterClient); !ok && clusterReply(err) {
		p := &PermanentError{Kind: KindCluster, Err: err}
		s.clusterNode.CompareAndSwap(nil, p)
		return p
	}
	return classify(err)
}

// clusterReply reports whether err is a Redis Cluster node's refusal of a key it does not serve.
func clusterReply(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ") || strings.HasPrefix(msg, "CROSSSLOT ") ||
		strings.Contains(msg, "SELECT is not allowed in cluster mode") // db > 0 on the node
}

func permanentKind(err error) (ErrorKind, bool) {
	var (
		rerr     redis.Error
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		record   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return KindCertificate, true
	case errors.As(err, &alert):
		// The server refused the handshake: its alert says why (certificate required, bad
		// certificate, unknown CA).
		return KindTLS, true
	case errors.As(err, &record):
		return KindTLS, true // not a TLS server: TLS configured against a plain port
	}
	msg := err.Error()
	if strings.Contains(msg, "remote error: tls: ") {
		// The server sent a TLS alert (certificate required, bad certificate, unknown CA).
		return KindTLS, true
	}
	if strings.Contains(msg, "DB index is out of range") {
		return KindDatabase, true // SELECT of the connection's db
	}
	if strings.Contains(msg, "The user executing the script can't run this command") {
		return KindPermission, true // a command inside a script, refused by the ACL
	}
	if errors.As(err, &rerr) {
		msg = rerr.Error()
	}
	for _, p := range []struct {
		code string
		kind ErrorKind
	}{{"WRONGPASS", KindAuth}, {"NOAUTH", KindAuth}, {"NOPERM", KindPermission}} {
		// A reply's code comes first; inside a script's error it follows the script's prefix.
		if strings.HasPrefix(msg, p.code+" ") || strings.Contains(msg, " "+p.code+" ") || strings.Contains(msg, "-"+p.code+" ") {
			return p.kind, true
		}
	}
	return "", false
}
