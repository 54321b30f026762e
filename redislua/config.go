package redislua

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds what a request waits on Redis (DESIGN §8); background calls get longer.
const DefaultTimeout = 50 * time.Millisecond

// Config is the `redis` block of the Caddyfile (DESIGN §9).
type Config struct {
	// Address lists host:port addresses: one is a standalone server, several a Redis Cluster,
	// and with Sentinel they are the sentinels' addresses.
	Address []string `json:"address,omitempty"`
	// URL is a redis:// or rediss:// URL (instead of Address).
	URL string `json:"url,omitempty"`
	// Sentinel is the master name: Address are then sentinels.
	Sentinel           string        `json:"sentinel,omitempty"`
	Username           string        `json:"username,omitempty"`
	Password           string        `json:"password,omitempty"`
	DB                 int           `json:"db,omitempty"`
	TLS                bool          `json:"tls,omitempty"`
	InsecureSkipVerify bool          `json:"insecure_skip_verify,omitempty"`
	KeyPrefix          string        `json:"key_prefix,omitempty"` // default DefaultPrefix
	Timeout            time.Duration `json:"timeout,omitempty"`    // what a request waits on Redis at most, default DefaultTimeout
	PoolSize           int           `json:"pool_size,omitempty"`  // 0 = go-redis default (10 per CPU)
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
			bad("url", "%v", err)
		}
		if c.Sentinel != "" {
			bad("sentinel", "needs the sentinels in address, not a url")
		}
	}
	if c.Sentinel != "" && len(c.Address) == 0 && c.URL == "" {
		bad("sentinel", "needs the sentinels' addresses in address")
	}
	if c.DB < 0 {
		bad("db", "must be >= 0, got %d", c.DB)
	}
	if c.DB != 0 && len(c.Address) > 1 && c.Sentinel == "" {
		bad("db", "a Redis Cluster (several addresses) has only db 0, got %d", c.DB)
	}
	if c.InsecureSkipVerify && !c.TLS && !strings.HasPrefix(c.URL, "rediss://") {
		bad("insecure_skip_verify", "needs tls")
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
func (c Config) newClient() (redis.UniversalClient, error) {
	// Retries are off: a script that reached the server but whose reply was lost must not run a
	// second time (a lease would be debited twice), and a dial that failed is not repeated within
	// one call (that only spends the call's timeout). The limiter retries on its own schedule.
	//
	// Timeout bounds what a request waits for (the limiter's StoreTimeout, through the call's
	// context); the socket timeouts are only a backstop and must be longer, so that a call past
	// Timeout is measured as slow (degradation levels) instead of failing, and its reply is not
	// lost (the limiter admits the waiting requests on credit meanwhile).
	callTimeout := max(c.Timeout, time.Second)
	var tlsConfig *tls.Config
	if c.TLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify}
	}
	if c.URL != "" {
		o, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("redis.url: %w", err)
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
		if tlsConfig != nil && o.TLSConfig == nil {
			o.TLSConfig = tlsConfig
		}
		if o.TLSConfig != nil && c.InsecureSkipVerify {
			o.TLSConfig.InsecureSkipVerify = true
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = callTimeout, callTimeout, callTimeout
		o.ContextTimeoutEnabled = true
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
		DB:                    c.DB,
		TLSConfig:             tlsConfig,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           callTimeout,
		ReadTimeout:           callTimeout,
		WriteTimeout:          callTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              c.PoolSize,
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

// clusterReloadInterval is how often a Redis Cluster client reloads the slot map unprompted.
const clusterReloadInterval = 5 * time.Second
