package redislua

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// DefaultTimeout bounds what a request waits on Redis; background calls get longer.
const DefaultTimeout = 50 * time.Millisecond

// Config is the `redis` block of the Caddyfile.
type Config struct {
	// Address lists host:port addresses: one is a standalone server, several a Redis Cluster,
	// and with Sentinel they are the sentinels' addresses.
	Address []string `json:"address,omitempty"`
	// URL is a redis:// or rediss:// URL (instead of Address).
	URL string `json:"url,omitempty"`
	// Sentinel is the master name: Address are then sentinels.
	Sentinel string `json:"sentinel,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// SentinelUsername and SentinelPassword are the sentinels' own credentials (their
	// requirepass or ACL user); Username and Password are the data nodes'.
	SentinelUsername string `json:"sentinel_username,omitempty"`
	SentinelPassword string `json:"sentinel_password,omitempty"`
	DB               int    `json:"db,omitempty"`
	// TLS connects over TLS (also implied by a rediss:// URL and by any other TLS option).
	TLS bool `json:"tls,omitempty"`
	// TLSClientAuth is the client certificate presented to a server that requires one.
	TLSClientAuth *ClientAuth `json:"tls_client_auth,omitempty"`
	// TLSServerName is the name the server's certificate must have (default: the host of the
	// address dialled).
	TLSServerName string `json:"tls_server_name,omitempty"`
	// TLSInsecureSkipVerify accepts any server certificate: for tests only.
	TLSInsecureSkipVerify bool `json:"tls_insecure_skip_verify,omitempty"`
	// RootCAs are the CAs a server certificate must chain to; nil = the system's. The Caddy
	// module fills it from tls_trust_pool (Caddy's tls.ca_pool.source modules).
	RootCAs *x509.CertPool `json:"-"`

	KeyPrefix string        `json:"key_prefix,omitempty"` // default DefaultPrefix
	Timeout   time.Duration `json:"-"`                    // what a request waits on Redis at most, default DefaultTimeout (JSON: the Caddy module's timeout)
	PoolSize  int           `json:"pool_size,omitempty"`  // 0 = go-redis default (10 per CPU)
}

// ClientAuth names the PEM files of a client certificate and its key.
type ClientAuth struct {
	CertificateFile string `json:"certificate_file,omitempty"`
	KeyFile         string `json:"key_file,omitempty"`
}

// UsesTLS reports whether the connection is made over TLS: tls, a rediss:// URL, or any TLS
// option (as in Caddy's reverse_proxy transport, a TLS option turns TLS on).
func (c Config) UsesTLS() bool {
	return c.TLS || strings.HasPrefix(c.URL, "rediss://") || c.TLSClientAuth != nil ||
		c.TLSServerName != "" || c.TLSInsecureSkipVerify || c.RootCAs != nil
}

// Validate checks the configuration; errors name the offending field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("redis.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch {
	case len(c.Address) > 0 && c.URL != "":
		bad("address", "address and url are mutually exclusive")
	case len(c.Address) == 0 && c.URL == "":
		bad("address", "an address or a url is required")
	}
	for i, a := range c.Address {
		if err := checkAddress(a); err != nil {
			bad(fmt.Sprintf("address[%d]", i), "%q: %v", a, err)
		}
	}
	if c.URL != "" {
		if _, err := redis.ParseURL(c.URL); err != nil {
			bad("url", "%s", redactURL(err.Error(), c.URL))
		} else if u, err := url.Parse(c.URL); err == nil && u.User != nil && c.Password == "" && urlPassword(c.URL) == "" {
			// as for username: no AUTH would be sent, and Redis' default user would answer (the
			// block's password, when given, is the one used)
			bad("url", "has credentials but no password (an unset placeholder?): without one Redis is reached as its default user")
		}
		if c.Sentinel != "" {
			bad("sentinel", "needs the sentinels in address, not a url")
		}
	}
	if c.Sentinel != "" && len(c.Address) == 0 && c.URL == "" {
		bad("sentinel", "needs the sentinels' addresses in address")
	}
	if c.Sentinel == "" && c.SentinelUsername != "" {
		bad("sentinel_username", "needs sentinel (the master name)")
	}
	if c.Sentinel == "" && c.SentinelPassword != "" {
		bad("sentinel_password", "needs sentinel (the master name)")
	}
	// go-redis sends no AUTH without a password: the connection would be Redis' default user's.
	if c.Username != "" && c.Password == "" && urlPassword(c.URL) == "" {
		bad("password", "is required with username %q (without it Redis is reached as its default user; a nopass ACL user takes any password)", c.Username)
	}
	if c.SentinelUsername != "" && c.SentinelPassword == "" {
		bad("sentinel_password", "is required with sentinel_username %q (without it the sentinels are reached as their default user)", c.SentinelUsername)
	}
	if c.DB < 0 {
		bad("db", "must be >= 0, got %d", c.DB)
	}
	if c.DB != 0 && len(c.Address) > 1 && c.Sentinel == "" {
		bad("db", "a Redis Cluster (several addresses) has only db 0, got %d", c.DB)
	}
	if a := c.TLSClientAuth; a != nil && (a.CertificateFile == "" || a.KeyFile == "") {
		bad("tls_client_auth", "needs both a certificate file and a key file")
	}
	if strings.ContainsAny(c.KeyPrefix, "{} \t\r\n") {
		bad("key_prefix", "%q must not contain braces or white space", c.KeyPrefix)
	}
	if c.Timeout < 0 {
		bad("timeout", "must be >= 0, got %v", c.Timeout)
	}
	if c.PoolSize < 0 {
		bad("pool_size", "must be >= 0, got %d", c.PoolSize)
	}
	return errors.Join(errs...)
}

// urlPassword is the password in a redis:// URL ("" for none, or a URL that does not parse).
func urlPassword(raw string) string {
	u, err := url.Parse(raw)
	if raw == "" || err != nil || u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	return pw
}

func checkAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("missing host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not 1-65535", port)
	}
	return nil
}

// withDefaults fills in the defaults of unset fields.
func (c Config) withDefaults() Config {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultPrefix
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// newClient builds the client: a URL or one address is a standalone server, several addresses a
// Redis Cluster, and a sentinel master name a failover client.
func (c Config) newClient(clientCert *tls.Certificate) (redis.UniversalClient, error) {
	// Retries are off: a script that reached the server but whose reply was lost must not run a
	// second time (a lease would be debited twice), and a dial that failed is not repeated within
	// one call (that only spends the call's timeout). The limiter retries on its own schedule.
	//
	// Timeout bounds what a request waits for (the limiter's StoreTimeout, through the call's
	// context); the socket timeouts are only a backstop and must be longer, so that a call past
	// Timeout is measured as slow (degradation levels) instead of failing, and its reply is not
	// lost (the limiter admits the waiting requests on credit meanwhile).
	callTimeout := max(c.Timeout, time.Second)
	tlsConfig := c.tlsConfig(clientCert)
	if c.URL != "" {
		o, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("redis.url: %s", redactURL(err.Error(), c.URL))
		}
		if c.Username != "" {
			o.Username = c.Username
		}
		if c.Password != "" {
			o.Password = c.Password
		}
		if c.DB != 0 {
			o.DB = c.DB
		}
		if tlsConfig != nil {
			if o.TLSConfig != nil && tlsConfig.ServerName == "" {
				tlsConfig.ServerName = o.TLSConfig.ServerName // the URL's host
			}
			o.TLSConfig = tlsConfig
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = callTimeout, callTimeout, callTimeout
		o.ContextTimeoutEnabled = true
		o.DisableIdentity, o.MaintNotificationsConfig = true, noMaintNotifications()
		if c.PoolSize > 0 {
			o.PoolSize = c.PoolSize
		}
		return redis.NewClient(o), nil
	}
	u := &redis.UniversalOptions{
		Addrs:                 c.Address,
		MasterName:            c.Sentinel,
		Username:              c.Username,
		Password:              c.Password,
		SentinelUsername:      c.SentinelUsername,
		SentinelPassword:      c.SentinelPassword,
		DB:                    c.DB,
		TLSConfig:             tlsConfig,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           callTimeout,
		ReadTimeout:           callTimeout,
		WriteTimeout:          callTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              c.PoolSize,
		// No CLIENT SETINFO nor CLIENT MAINT_NOTIFICATIONS: the least-privilege ACL user
		// (ACLCommands) is not allowed them, and every refused attempt lands in Redis' ACL LOG.
		DisableIdentity:          true,
		MaintNotificationsConfig: noMaintNotifications(),
	}
	if len(c.Address) > 1 && c.Sentinel == "" {
		o := u.Cluster()
		// The slot map is also reloaded after every failed call (see Store.failed); this
		// backstop bounds how long a map that went stale without an error can live.
		o.ClusterStateReloadInterval = clusterReloadInterval
		return redis.NewClusterClient(o), nil
	}
	return redis.NewUniversalClient(u), nil
}

func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// clusterReloadInterval is how often a Redis Cluster client reloads the slot map unprompted.
const clusterReloadInterval = 5 * time.Second

// tlsConfig is the client's TLS configuration, nil without TLS.
func (c Config) tlsConfig(clientCert *tls.Certificate) *tls.Config {
	if !c.UsesTLS() {
		return nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		RootCAs:            c.RootCAs,
		ServerName:         c.TLSServerName,
		InsecureSkipVerify: c.TLSInsecureSkipVerify, //nolint:gosec // opt-in tls_insecure_skip_verify, warned about when set
	}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	return cfg
}

// loadClientCert loads tls_client_auth's key pair (nil without one). Errors name the files,
// never their content.
func (c Config) loadClientCert() (*tls.Certificate, error) {
	a := c.TLSClientAuth
	if a == nil {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(a.CertificateFile, a.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("redis.tls_client_auth: loading %s and %s: %v", a.CertificateFile, a.KeyFile, err)
	}
	return &cert, nil
}

// redactURL removes the URL's credentials from msg (a parse error may quote the URL).
func redactURL(msg, raw string) string {
	at := strings.LastIndex(raw, "@")
	scheme := strings.Index(raw, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return msg
	}
	userinfo := raw[scheme+3 : at]
	if userinfo == "" {
		return msg
	}
	return strings.ReplaceAll(msg, userinfo, "xxxxx")
}
