package redislua

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The start-up probe (docs/security.md, "Permanent errors"): when a cluster's shared state is
// created, Caddy checks in a bounded time that Redis accepts this configuration, so that
// `caddy validate` and the start-up log name a wrong password, an untrusted certificate or a
// missing ACL permission at once instead of the limiter discovering them request by request.
//
// It touches no data: PING proves the connection (TLS handshake, certificates, AUTH/HELLO),
// and one Lua script asks Redis, with redis.acl_check_cmd (Redis 7+), whether the connected
// user may run each command the Store needs on a key and the channel under its prefix. The
// script only asks; it runs none of them.

// probeChecks are the commands of ACLCommands the probe asks about, each with arguments of the
// shape the Store uses ("K" is replaced by a key under the prefix, "C" by the cluster's
// notification channel). The handshake commands (HELLO, AUTH, PING, SELECT) are not asked
// about: PING itself is the check of the connection, and SELECT matters only with a db. The
// Cluster ones (CLUSTER SLOTS, COMMAND) are asked about only on a Cluster.
var probeChecks = []struct {
	name    string
	args    []string
	cluster bool
}{
	{"cluster|slots", []string{"cluster", "slots"}, true},
	{"command", []string{"command"}, true},
	{"evalsha", []string{"evalsha", "0000000000000000000000000000000000000000", "1", "K"}, false},
	{"eval", []string{"eval", "return 0", "1", "K"}, false},
	{"time", []string{"time"}, false},
	{"hget", []string{"hget", "K", "f"}, false},
	{"hmget", []string{"hmget", "K", "f"}, false},
	{"hgetall", []string{"hgetall", "K"}, false},
	{"hset", []string{"hset", "K", "f", "v"}, false},
	{"hdel", []string{"hdel", "K", "f"}, false},
	{"hincrby", []string{"hincrby", "K", "f", "1"}, false},
	{"hlen", []string{"hlen", "K"}, false},
	{"hexists", []string{"hexists", "K", "f"}, false},
	{"zadd", []string{"zadd", "K", "1", "m"}, false},
	{"zcard", []string{"zcard", "K"}, false},
	{"zscore", []string{"zscore", "K", "m"}, false},
	{"zremrangebyscore", []string{"zremrangebyscore", "K", "0", "1"}, false},
	{"pexpire", []string{"pexpire", "K", "1"}, false},
	{"persist", []string{"persist", "K"}, false},
	{"publish", []string{"publish", "C", "0"}, false},
	{"subscribe", []string{"subscribe", "C"}, false},
}

// probeHandshake are the commands of ACLCommands that probeChecks leaves out on purpose.
var probeHandshake = []string{"hello", "auth", "ping", "select"}

// aclCheckScript returns the names of the checks Redis refuses, or -1 when the server has no
// redis.acl_check_cmd (before Redis 7: nothing can be asked, the limiter finds out by use).
// ARGV is a list of groups: <n>, <name>, <n-1 arguments>.
var aclCheckScript = `
if type(redis.acl_check_cmd) ~= 'function' then return -1 end
local denied = {}
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local name = ARGV[i + 1]
  local args = {}
  for j = 2, n do args[#args + 1] = ARGV[i + j] end
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(args))
  if ok and not allowed then denied[#denied + 1] = name end
  i = i + n + 1
end
return denied
`

// Probe checks that Redis accepts this Store's configuration for cluster: the connection
// (TLS, certificates, credentials) with PING, then the ACL permissions the Store needs (see
// CheckACL), then that one address is not a Redis Cluster node (checkNotClusterNode). It returns nil, a *PermanentError (the configuration is refused: the cause is in
// the message, the remedy in Remedy), or a transient error (Redis unreachable, too slow), which
// says nothing about the configuration. ctx bounds it.
func (s *Store) Probe(ctx context.Context, cluster string) error {
	if err := s.Ping(ctx); err != nil {
		return err
	}
	if err := s.CheckACL(ctx, cluster); err != nil {
		return err
	}
	// after CheckACL: a user that may not run it is told so by CheckACL, with no ACL denial
	return s.checkNotClusterNode(ctx)
}

// checkNotClusterNode makes sure that a standalone or Sentinel client's server is not a node of
// a Redis Cluster: a script declaring two keys of different slots runs on any other server,
// and a Cluster node refuses it (CROSSSLOT, or MOVED). Nothing is read or written. Without it
// the misconfiguration showed only as leases refused with MOVED, as an endless outage.
func (s *Store) checkNotClusterNode(ctx context.Context) error {
	c, ok := s.client.(*redis.Client)
	if !ok {
		return nil // a Cluster client
	}
	// Slots 15495 and 3300; under the prefix, which the ACL user may name.
	a, b := s.keys.prefix+":{a}:probe", s.keys.prefix+":{b}:probe"
	if err := c.Eval(ctx, "return 1", []string{a, b}).Err(); err != nil {
		return fmt.Errorf("redislua: probe: %w", s.classify(err))
	}
	return nil
}

// Ping checks the connection to every server the Store talks to (every master of a Cluster):
// nil, a *PermanentError or a transient error, as Probe. A server that closes the connection is
// asked whether it speaks TLS (tlsRequired): a TLS port dialled without tls.
func (s *Store) Ping(ctx context.Context) error {
	err := s.eachServer(ctx, func(ctx context.Context, c redis.Cmdable) error {
		return c.Ping(ctx).Err()
	})
	if p := s.tlsRequired(ctx, err); p != nil {
		return fmt.Errorf("redislua: probe: %w", p)
	}
	if err != nil {
		return fmt.Errorf("redislua: probe: %w", s.classify(err))
	}
	return nil
}

// CheckACL asks Redis whether the connected user may run every command the Store needs on its
// keys and its notification channel (redis.acl_check_cmd in a script; nothing is run). A
// refusal is a *PermanentError of KindPermission naming the commands; a server without
// redis.acl_check_cmd (before Redis 7) is not checked.
func (s *Store) CheckACL(ctx context.Context, cluster string) error {
	_, isCluster := s.client.(*redis.ClusterClient)
	key, channel := s.keys.cfg(cluster), s.keys.events(cluster)
	var argv []any
	for _, c := range probeChecks {
		if c.cluster && !isCluster {
			continue
		}
		argv = append(argv, len(c.args)+1, c.name)
		for _, a := range c.args {
			switch a {
			case "K":
				a = key
			case "C":
				a = channel
			}
			argv = append(argv, a)
		}
	}
	var denied deniedList
	err := s.eachServer(ctx, func(ctx context.Context, c redis.Cmdable) error {
		v, err := c.Eval(ctx, aclCheckScript, nil, argv...).Result()
		if err != nil {
			return err
		}
		if list, ok := v.([]any); ok {
			for _, d := range list {
				if name, ok := d.(string); ok {
					denied.add(name)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redislua: probe: %w", s.classify(err))
	}
	if list := denied.list(); len(list) > 0 {
		return &PermanentError{Kind: KindPermission, Denied: list, Err: fmt.Errorf(
			"the Redis user may not run %s (on keys %s:*, channel %s)",
			strings.Join(list, ", "), s.keys.prefix, channel)}
	}
	return nil
}

// eachServer runs f on the one server of a standalone or Sentinel client, or on every master
// of a Cluster (each node has its own ACL), and returns the first error.
func (s *Store) eachServer(ctx context.Context, f func(context.Context, redis.Cmdable) error) error {
	if c, ok := s.client.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) })
	}
	c, ok := s.client.(redis.Cmdable)
	if !ok {
		return errors.New("redislua: probe: unexpected client type")
	}
	return f(ctx, c)
}

// deniedList collects the refused command names of every server, each once, in probeChecks order.
type deniedList struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (l *deniedList) add(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[name] = true
}

func (l *deniedList) list() []string {
	var out []string
	for _, c := range probeChecks {
		if l.seen[c.name] {
			out = append(out, c.name)
		}
	}
	return out
}

// evictionScript reads INFO memory where the user may (asked first with redis.acl_check_cmd,
// so a least-privilege user leaves no denial in the ACL log); false where it may not.
var evictionScript = `
if type(redis.acl_check_cmd) == 'function' and not redis.acl_check_cmd('info', 'memory') then return false end
local ok, info = pcall(redis.call, 'info', 'memory')
if not ok then return false end
return info
`

// Evicting reports a server that may evict this Store's keys: maxmemory set with a
// maxmemory-policy other than noeviction (every volatile-* policy picks our keys, which have
// TTLs). An evicted bucket comes back full, so while memory is short the quotas do not hold.
// It returns "" when no server evicts, or when INFO is not allowed or fails (unknown).
func (s *Store) Evicting(ctx context.Context) string {
	var mu sync.Mutex // every master of a Cluster answers at once
	var found string
	_ = s.eachServer(ctx, func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Eval(ctx, evictionScript, nil).Text()
		if desc := evictionRisk(info); err == nil && desc != "" {
			mu.Lock()
			found = desc
			mu.Unlock()
		}
		return nil
	})
	return found
}

// evictionRisk reads INFO memory's maxmemory and maxmemory_policy: "" unless keys may be evicted.
func evictionRisk(info string) string {
	var maxmemory, policy string
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "maxmemory":
			maxmemory = v
		case "maxmemory_policy":
			policy = v
		}
	}
	if maxmemory == "" || maxmemory == "0" || policy == "" || policy == "noeviction" {
		return ""
	}
	return "maxmemory " + maxmemory + " bytes with maxmemory-policy " + policy
}
