package tierbucket

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// RedisConfig is the `redis` block. It is redislua.Config with the timeout as a Caddy duration
// ("50ms", "1d", like every duration of the config), and placeholders ({env.REDIS_PASSWORD}, {file./run/secret})
// allowed in address, url, sentinel, username and password; they are replaced at provisioning.
type RedisConfig struct {
	redislua.Config
	Timeout caddy.Duration `json:"timeout,omitempty"` // what a request waits on Redis at most (default 50ms)

	// TrustPoolRaw is the pool of CAs that Redis' certificate must chain to: one of Caddy's
	// tls.ca_pool.source modules ({"provider": "file", "pem_files": [...]}, "inline", ...),
	// as in reverse_proxy's transport. Default: the system's roots.
	TrustPoolRaw json.RawMessage `json:"tls_trust_pool,omitempty" caddy:"namespace=tls.ca_pool.source inline_key=provider"`
}

// resolve replaces the placeholders, loads the trust pool module and returns the redislua
// config, validated. A nil ctx (tests of the parsing) loads no module.
func (c *RedisConfig) resolve(ctx *caddy.Context) (redislua.Config, error) {
	repl := caddy.NewReplacer()
	rc := c.Config
	rc.Timeout = time.Duration(c.Timeout)
	rc.Address = nil // a copy: the handler's config keeps its placeholders
	for _, a := range c.Address {
		rc.Address = append(rc.Address, repl.ReplaceKnown(a, ""))
	}
	for _, f := range []struct {
		name string
		v    *string
	}{
		{"url", &rc.URL},
		{"sentinel", &rc.Sentinel},
		{"username", &rc.Username},
		{"password", &rc.Password},
		{"sentinel_username", &rc.SentinelUsername},
		{"sentinel_password", &rc.SentinelPassword},
		{"tls_server_name", &rc.TLSServerName},
	} {
		set := *f.v != ""
		*f.v = repl.ReplaceKnown(*f.v, "")
		if set && *f.v == "" {
			// An unset {env.*}: an empty password would reach Redis as its default user.
			return rc, fmt.Errorf("redis.%s is empty once its placeholders are replaced: the variable it names is unset or empty in Caddy's environment", f.name)
		}
	}
	if a := c.TLSClientAuth; a != nil {
		rc.TLSClientAuth = &redislua.ClientAuth{
			CertificateFile: repl.ReplaceKnown(a.CertificateFile, ""),
			KeyFile:         repl.ReplaceKnown(a.KeyFile, ""),
		}
	}
	if err := rc.Validate(); err != nil {
		return rc, err
	}
	if len(c.TrustPoolRaw) > 0 {
		if ctx == nil {
			return rc, fmt.Errorf("redis.tls_trust_pool: no Caddy context to load it")
		}
		// Loaded from a copy: LoadModule clears the raw field it loads, and the handler's
		// config must keep it (it is part of the cluster's definition).
		holder := struct {
			Raw json.RawMessage `caddy:"namespace=tls.ca_pool.source inline_key=provider"`
		}{Raw: append(json.RawMessage(nil), c.TrustPoolRaw...)}
		mod, err := ctx.LoadModule(&holder, "Raw")
		if err != nil {
			return rc, fmt.Errorf("redis.tls_trust_pool: %v", err)
		}
		ca, ok := mod.(caddytls.CA)
		if !ok {
			return rc, fmt.Errorf("redis.tls_trust_pool: module %T is not a CA pool source", mod)
		}
		rc.RootCAs = ca.CertPool()
		if rc.RootCAs == nil {
			return rc, fmt.Errorf("redis.tls_trust_pool: the module gave no certificates")
		}
	}
	return rc, nil
}

// identity names the Store a redis config points at (everything but the credentials and the
// client tuning), so that a reload that points a cluster at another Store gets a new state.
func redisIdentity(rc redislua.Config) string {
	id := struct {
		Address  []string `json:"a,omitempty"`
		URL      string   `json:"u,omitempty"`
		Sentinel string   `json:"s,omitempty"`
		DB       int      `json:"d,omitempty"`
		Prefix   string   `json:"p,omitempty"`
	}{rc.Address, rc.URL, rc.Sentinel, rc.DB, rc.KeyPrefix}
	b, err := json.Marshal(id)
	if err != nil {
		return fmt.Sprint(id)
	}
	return "redis:" + string(b)
}

// redisConnDigest is a digest of what the connection to the Store authenticates and encrypts
// with: the credentials and the TLS settings (the trust pool as written). A reload that changes
// them (the operator fixing a refused password or certificate, or rotating them) gets a new
// state with a new client; the old state's client kept the old settings. Only the digest is
// kept, never the password.
func redisConnDigest(rc redislua.Config, trustPool json.RawMessage) string {
	conn := struct {
		Username   string               `json:"u,omitempty"`
		Password   string               `json:"p,omitempty"`
		SentUser   string               `json:"su,omitempty"`
		SentPass   string               `json:"sp,omitempty"`
		TLS        bool                 `json:"t,omitempty"`
		ClientAuth *redislua.ClientAuth `json:"c,omitempty"`
		ServerName string               `json:"n,omitempty"`
		SkipVerify bool                 `json:"s,omitempty"`
		TrustPool  json.RawMessage      `json:"r,omitempty"`
	}{rc.Username, rc.Password, rc.SentinelUsername, rc.SentinelPassword, rc.TLS, rc.TLSClientAuth, rc.TLSServerName, rc.TLSInsecureSkipVerify, trustPool}
	b, _ := json.Marshal(conn) //nolint:gosec // hashed below, never stored or shown; strings, bools and raw JSON cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// ctxPtr is the handler's Caddy context, nil before setup gave it one.
func (h *Handler) ctxPtr() *caddy.Context {
	if h.ctx.Context == nil {
		return nil
	}
	return &h.ctx
}
