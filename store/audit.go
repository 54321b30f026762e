package store

import "fmt"

// The audit log of a cluster records its control-plane changes (admin overrides, the operator
// emergency, enabling and disabling apps) fleet-wide, so that any instance can show who
// changed what. Entries are opaque to the Store (the admin API encodes them).

// MaxAuditEntries bounds a cluster's audit log: the newest entries are kept.
const MaxAuditEntries = 1000

// MaxAuditEntrySize bounds one entry (a change's before and after are small policies).
const MaxAuditEntrySize = 16 << 10

// ValidateAuditEntry reports an entry AppendAudit refuses: empty or over MaxAuditEntrySize.
func ValidateAuditEntry(entry []byte) error {
	if len(entry) == 0 || len(entry) > MaxAuditEntrySize {
		return fmt.Errorf("audit entry: %d bytes: must be 1 to %d", len(entry), MaxAuditEntrySize)
	}
	return nil
}
