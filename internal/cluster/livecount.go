package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// liveInstancesFile persists a cluster's live-instance count in Caddy's data directory, so that
// a process that starts while Redis is down sizes its rescue buckets for the fleet it last saw
// instead of assuming it is alone (docs/operations.md, "Rescue buckets and their bound"). It returns the count stored
// by a previous run (0 if none) and the function that stores a new one.
func liveInstancesFile(key Key, logger *zap.Logger) (int, func(int)) {
	sum := sha256.Sum256([]byte(key.Cluster + "\x00" + key.Store))
	path := filepath.Join(caddy.AppDataDir(), "rate_limit", "live-"+hex.EncodeToString(sum[:8]))
	known := 0
	if b, err := os.ReadFile(path); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			known = n
		}
	}
	store := func(n int) {
		err := os.MkdirAll(filepath.Dir(path), 0o700)
		if err == nil {
			tmp := path + ".tmp"
			if err = os.WriteFile(tmp, []byte(strconv.Itoa(n)+"\n"), 0o600); err == nil {
				err = os.Rename(tmp, path)
			}
		}
		if err != nil && logger != nil {
			logger.Debug("rate_limit: cannot persist the live-instance count", zap.String("path", path), zap.Error(err))
		}
	}
	return known, store
}
