package tierbucket

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// RedisConfig is the `redis` block (DESIGN §9). It is redislua.Config with Caddy's duration
// syntax ("50ms") for timeout, and placeholders ({env.REDIS_PASSWORD}, {file./run/secret})
// allowed in address, url, sentinel, username and password; they are replaced at provisioning.
type RedisConfig struct {
	Address            []string       `json:"address,omitempty"`
	URL                string         `json:"url,omitempty"`
	Sentinel           string         `json:"sentinel,omitempty"`
	Username           string         `json:"username,omitempty"`
	Password           string         `json:"password,omitempty"`
	DB                 int            `json:"db,omitempty"`
	TLS                bool           `json:"tls,omitempty"`
	InsecureSkipVerify bool           `json:"insecure_skip_verify,omitempty"`
	KeyPrefix          string         `json:"key_prefix,omitempty"`
	Timeout            caddy.Duration `json:"timeout,omitempty"`
	PoolSize           int            `json:"pool_size,omitempty"`
}

// resolve replaces the placeholders and returns the redislua config, validated.
func (c *RedisConfig) resolve() (redislua.Config, error) {
	repl := caddy.NewReplacer()
	rc := redislua.Config{
		URL:                repl.ReplaceKnown(c.URL, ""),
		Sentinel:           repl.ReplaceKnown(c.Sentinel, ""),
		Username:           repl.ReplaceKnown(c.Username, ""),
		Password:           repl.ReplaceKnown(c.Password, ""),
		DB:                 c.DB,
		TLS:                c.TLS,
		InsecureSkipVerify: c.InsecureSkipVerify,
		KeyPrefix:          c.KeyPrefix,
		Timeout:            time.Duration(c.Timeout),
		PoolSize:           c.PoolSize,
	}
	for _, a := range c.Address {
		rc.Address = append(rc.Address, repl.ReplaceKnown(a, ""))
	}
	if err := rc.Validate(); err != nil {
		return rc, err
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
