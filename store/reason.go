package store

// Reason says why a request was rejected. The zero value means admitted.
type Reason uint8

// The rejection reasons, in the order of their metric label values.
const (
	ReasonNone Reason = iota
	ReasonAppExhausted
	ReasonClusterExhausted
	ReasonEmergencyBlocked
	ReasonEmergencyQuotaExceeded
	ReasonBorrowLimitExceeded
	ReasonAppLimitExceeded
	ReasonClusterLimitExceeded
	ReasonUnknownApp
	ReasonInvalidAppID
	ReasonRedisUnavailable
	ReasonAppDisabled
	NumReasons // the number of reasons, ReasonNone included
)

var reasonNames = [NumReasons]string{
	ReasonNone:                   "",
	ReasonAppExhausted:           "app_exhausted",
	ReasonClusterExhausted:       "cluster_exhausted",
	ReasonEmergencyBlocked:       "emergency_blocked",
	ReasonEmergencyQuotaExceeded: "emergency_quota_exceeded",
	ReasonBorrowLimitExceeded:    "borrow_limit_exceeded",
	ReasonAppLimitExceeded:       "app_limit_exceeded",
	ReasonClusterLimitExceeded:   "cluster_limit_exceeded",
	ReasonUnknownApp:             "unknown_app",
	ReasonInvalidAppID:           "invalid_app_id",
	ReasonRedisUnavailable:       "redis_unavailable",
	ReasonAppDisabled:            "app_disabled",
}

// String returns the reason as it appears in responses and metrics ("" for ReasonNone).
func (r Reason) String() string {
	if r >= NumReasons {
		return "unknown"
	}
	return reasonNames[r]
}

// ParseReason is the inverse of String; ok is false for a name that is not a reason.
func ParseReason(s string) (r Reason, ok bool) {
	for i, n := range reasonNames {
		if n == s {
			return Reason(i), true
		}
	}
	return ReasonNone, false
}
