package redislua

import (
	"fmt"
	"math"

	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// The Store rejects malformed calls with a precise error before they reach Redis, with the same
// rules as the memory store (a valid configuration never triggers them).

// maxAmount bounds burst: doubles represent every whole token up to 2^53 exactly.
const maxAmount = 1 << 53

func checkLease(r limiter.LeaseRequest) error {
	if err := checkApp(r.Cluster, r.App, r.Policy); err != nil {
		return err
	}
	switch {
	case !finite(r.Factor) || r.Factor < 0:
		return fmt.Errorf("lease for app %q: factor %v: must be a finite number >= 0", r.App, r.Factor)
	case r.Need < 0:
		return fmt.Errorf("lease for app %q: need %d: must be >= 0", r.App, r.Need)
	case r.Want < 0:
		return fmt.Errorf("lease for app %q: want %d: must be >= 0", r.App, r.Want)
	}
	return nil
}

func checkReport(r limiter.Report) error {
	if err := checkCluster(r.Cluster); err != nil {
		return err
	}
	if r.Instance == "" {
		return fmt.Errorf("report for cluster %q: empty instance id", r.Cluster.ID)
	}
	if r.InFlight < 0 {
		return fmt.Errorf("report from instance %q: in-flight %d: must be >= 0", r.Instance, r.InFlight)
	}
	if r.Seq > maxAmount {
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

func checkApp(c limiter.ClusterPolicy, app string, p limiter.AppPolicy) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	switch {
	case app == "":
		return fmt.Errorf("cluster %q: empty app id", c.ID)
	case !finite(p.Guaranteed) || p.Guaranteed <= 0:
		return fmt.Errorf("app %q: guaranteed %v: must be a finite number > 0", app, p.Guaranteed)
	case !finite(p.Burst) || p.Burst < p.Guaranteed || p.Burst > maxAmount:
		return fmt.Errorf("app %q: burst %v: must be a number >= guaranteed (%v) and <= 2^53", app, p.Burst, p.Guaranteed)
	}
	return nil
}

func checkCluster(c limiter.ClusterPolicy) error {
	if !finite(c.Capacity) || c.Capacity < 0 {
		return fmt.Errorf("cluster %q: capacity %v: must be a finite number >= 0", c.ID, c.Capacity)
	}
	if c.Capacity > 0 && !finite(c.EmergencyThreshold) {
		return fmt.Errorf("cluster %q: emergency_threshold %v: must be a finite number", c.ID, c.EmergencyThreshold)
	}
	for p, r := range c.EmergencyRatios {
		if !finite(r) {
			return fmt.Errorf("cluster %q: emergency_ratios[%d] %v: must be a finite number", c.ID, p, r)
		}
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
