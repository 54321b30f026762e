package redislua

import "strings"

// ACLCommands is the least-privilege command list of the Redis ACL user the Store connects
// as (docs/security.md): the connection handshake (HELLO, AUTH, PING, and SELECT for a db other
// than 0; the client sends no CLIENT SETINFO), the cluster slot map and the command table (COMMAND, which a Cluster client reads to find
// each command's keys), the scripts (EVALSHA, then EVAL when the
// script cache is empty) and the commands the scripts call, the overrides (HGETALL, HGET, HMGET)
// and their notification channel (PUBLISH, SUBSCRIBE). The end-to-end and integration tests
// connect as a user with exactly these rules, so the list cannot drift from the code.
const ACLCommands = "-@all +hello +auth +ping +select +cluster|slots +command " +
	"+evalsha +eval " +
	"+time +hget +hmget +hgetall +hset +hdel +hincrby +hlen +hexists " +
	"+zadd +zcard +zscore +zremrangebyscore +pexpire +persist " +
	"+publish +subscribe"

// ACLRules is the rest of an `ACL SETUSER <user>` rule (after the user name) for a user
// confined to the key prefix: its keys ~<prefix>:*, its channels &<prefix>:* and ACLCommands.
// The password is added by the caller (">password").
func ACLRules(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return strings.Join([]string{"on", "resetkeys", "resetchannels", "~" + prefix + ":*", "&" + prefix + ":*", ACLCommands}, " ")
}
