package limiter

import (
	"fmt"
	"math"
)

// The MemoryStore rejects malformed calls with a precise error instead of storing NaN or
// negative amounts; valid configurations never trigger these.

// memMaxAmount bounds burst: floats represent every whole token up to 2^53 exactly.
const memMaxAmount = 1 << 53

func memCheckLease(r LeaseRequest) error {
	if err := memCheckApp(r.Cluster, r.App, r.Policy); err != nil {
		return err
	}
	switch {
	case !memFinite(r.Factor) || r.Factor < 0:
		return fmt.Errorf("lease for app %q: factor %v: must be a finite number >= 0", r.App, r.Factor)
	case r.Need < 0:
		return fmt.Errorf("lease for app %q: need %d: must be >= 0", r.App, r.Need)
	case r.Want < 0:
		return fmt.Errorf("lease for app %q: want %d: must be >= 0", r.App, r.Want)
	}
	return nil
}

func memCheckReturn(r Return) error {
	return memCheckApp(r.Cluster, r.App, r.Policy)
}

func memCheckReport(r Report) error {
	if err := memCheckCluster(r.Cluster); err != nil {
		return err
	}
	if r.Instance == "" {
		return fmt.Errorf("report for cluster %q: empty instance id", r.Cluster.ID)
	}
	if r.InFlight < 0 {
		return fmt.Errorf("report from instance %q: in-flight %d: must be >= 0", r.Instance, r.InFlight)
	}
	if r.Seq > memMaxAmount {
		return fmt.Errorf("report from instance %q: seq %d: must be <= 2^53", r.Instance, r.Seq)
	}
	for _, a := range r.Apps {
		switch {
		case a.App == "":
			return fmt.Errorf("report from instance %q: empty app id", r.Instance)
		case a.Requests < 0 || a.Cost < 0 || a.InFlight < 0:
			return fmt.Errorf("report from instance %q, app %q: requests %d, cost %d, in-flight %d: must be >= 0",
				r.Instance, a.App, a.Requests, a.Cost, a.InFlight)
		}
	}
	return nil
}

func memCheckApp(c ClusterPolicy, app string, p AppPolicy) error {
	if err := memCheckCluster(c); err != nil {
		return err
	}
	switch {
	case app == "":
		return fmt.Errorf("cluster %q: empty app id", c.ID)
	case !memFinite(p.Guaranteed) || p.Guaranteed <= 0:
		return fmt.Errorf("app %q: guaranteed %v: must be a finite number > 0", app, p.Guaranteed)
	case !memFinite(p.Burst) || p.Burst < p.Guaranteed || p.Burst > memMaxAmount:
		return fmt.Errorf("app %q: burst %v: must be a number >= guaranteed (%v) and <= 2^53", app, p.Burst, p.Guaranteed)
	}
	return nil
}

func memCheckCluster(c ClusterPolicy) error {
	if !memFinite(c.Capacity) || c.Capacity < 0 {
		return fmt.Errorf("cluster %q: capacity %v: must be a finite number >= 0", c.ID, c.Capacity)
	}
	if c.Capacity > 0 && !memFinite(c.EmergencyThreshold) {
		return fmt.Errorf("cluster %q: emergency_threshold %v: must be a finite number", c.ID, c.EmergencyThreshold)
	}
	return nil
}

func memFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
