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
	redislua.Config
	Timeout caddy.Duration `json:"timeout,omitempty"` // shadows Config.Timeout
}

// resolve replaces the placeholders and returns the redislua config, validated.
func (c *RedisConfig) resolve() (redislua.Config, error) {
	repl := caddy.NewReplacer()
	rc := c.Config
	rc.Timeout = time.Duration(c.Timeout)
	rc.Address = nil // a copy: the handler's config keeps its placeholders
	for _, a := range c.Address {
		rc.Address = append(rc.Address, repl.ReplaceKnown(a, ""))
	}
	for _, f := range []*string{&rc.URL, &rc.Sentinel, &rc.Username, &rc.Password} {
		*f = repl.ReplaceKnown(*f, "")
	}
	return rc, rc.Validate()
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
