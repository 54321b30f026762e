package redislua

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// A cluster's audit log is its :audit hash, in the cluster's slot: field "seq", the newest
// entry's number, and one field per entry number. append_audit.lua adds an entry and deletes
// the one MaxAuditEntries older, with the commands of the documented ACL.

// AppendAudit implements store.Store.
func (s *Store) AppendAudit(ctx context.Context, cluster string, entry []byte) error {
	if err := store.ValidateAuditEntry(entry); err != nil {
		return fmt.Errorf("redislua: %w", err)
	}
	err := appendAuditScript.Run(ctx, s.client, []string{s.keys.audit(cluster)}, string(entry), store.MaxAuditEntries).Err()
	if err != nil {
		s.failed()
		return fmt.Errorf("redislua: audit: %w", s.classify(err))
	}
	return nil
}

// Audit implements store.Store.
func (s *Store) Audit(ctx context.Context, cluster string, limit int) ([][]byte, error) {
	if limit <= 0 {
		return nil, nil
	}
	all, err := s.client.HGetAll(ctx, s.keys.audit(cluster)).Result()
	if err != nil {
		s.failed()
		return nil, fmt.Errorf("redislua: audit: %w", s.classify(err))
	}
	type numbered struct {
		n     int64
		entry string
	}
	entries := make([]numbered, 0, len(all))
	for k, v := range all {
		if n, err := strconv.ParseInt(k, 10, 64); err == nil {
			entries = append(entries, numbered{n, v})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].n > entries[j].n })
	out := make([][]byte, min(limit, len(entries), store.MaxAuditEntries))
	for i := range out {
		out[i] = []byte(entries[i].entry)
	}
	return out, nil
}
