package store

import (
	"fmt"
	"math"
	"time"
)

// Every Store rejects malformed calls with these checks, so that no store keeps NaN or negative
// amounts and both stores refuse exactly the same inputs; valid configurations never trigger them.

// MaxAmount bounds burst and Seq: doubles represent every whole number up to 2^53 exactly.
const MaxAmount = 1 << 53

// Validate reports a malformed lease request.
func (r LeaseRequest) Validate() error {
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
	case !finite(r.Unallocated) || r.Unallocated < 0:
		return fmt.Errorf("lease for app %q: unallocated %v: must be a finite number >= 0", r.App, r.Unallocated)
	}
	return checkStats("lease", r.App, r.Instance, r.Stats, r.StatsInterval)
}

// Validate reports a malformed return.
func (r Return) Validate() error {
	if err := checkApp(r.Cluster, r.App, r.Policy); err != nil {
		return err
	}
	return checkStats("return", r.App, r.Instance, r.Stats, r.StatsInterval)
}

// checkStats reports a malformed statistics batch of a call (lease or return) of app.
func checkStats(call, app, instance string, st StatsBatch, interval time.Duration) error {
	switch {
	case interval < 0:
		return fmt.Errorf("%s for app %q: stats interval %v: must be >= 0", call, app, interval)
	case st.Requests < 0 || st.Seq > MaxAmount:
		return fmt.Errorf("%s for app %q: stats requests %d seq %d: must be >= 0 and <= 2^53", call, app, st.Requests, st.Seq)
	case st.Seq != 0 && instance == "":
		return fmt.Errorf("%s for app %q: statistics need an instance id", call, app)
	}
	return nil
}

// Validate reports a malformed report.
func (r Report) Validate() error {
	if err := checkCluster(r.Cluster); err != nil {
		return err
	}
	if r.Instance == "" {
		return fmt.Errorf("report for cluster %q: empty instance id", r.Cluster.ID)
	}
	if r.InFlight < 0 || r.Cost < 0 {
		return fmt.Errorf("report from instance %q: in-flight %d, cost %d: must be >= 0", r.Instance, r.InFlight, r.Cost)
	}
	if r.Seq > MaxAmount {
		return fmt.Errorf("report from instance %q: seq %d: must be <= 2^53", r.Instance, r.Seq)
	}
	if r.StatsInterval < 0 {
		return fmt.Errorf("report from instance %q: stats interval %v: must be >= 0", r.Instance, r.StatsInterval)
	}
	if err := r.Signals.validate(r.Instance); err != nil {
		return err
	}
	for _, a := range r.Apps {
		switch {
		case a.App == "":
			return fmt.Errorf("report from instance %q: empty app id", r.Instance)
		case a.Seq > MaxAmount:
			return fmt.Errorf("report from instance %q, app %q: seq %d: must be <= 2^53", r.Instance, a.App, a.Seq)
		case a.Requests < 0 || a.Cost < 0 || a.InFlight < 0:
			return fmt.Errorf("report from instance %q, app %q: requests %d, cost %d, in-flight %d: must be >= 0",
				r.Instance, a.App, a.Requests, a.Cost, a.InFlight)
		}
	}
	return nil
}

func checkApp(c ClusterPolicy, app string, p AppPolicy) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	switch {
	case app == "":
		return fmt.Errorf("cluster %q: empty app id", c.ID)
	case !finite(p.Guaranteed) || p.Guaranteed <= 0:
		return fmt.Errorf("app %q: guaranteed %v: must be a finite number > 0", app, p.Guaranteed)
	case !finite(p.Burst) || p.Burst < p.Guaranteed || p.Burst > MaxAmount:
		return fmt.Errorf("app %q: burst %v: must be a number >= guaranteed (%v) and <= 2^53", app, p.Burst, p.Guaranteed)
	case !finite(p.MaxBorrow) || p.MaxBorrow < 0 || p.MaxBorrow > MaxAmount:
		return fmt.Errorf("app %q: max_borrow %v: must be a number >= 0 and <= 2^53", app, p.MaxBorrow)
	case p.Warmup < 0:
		return fmt.Errorf("app %q: warmup %v: must be >= 0", app, p.Warmup)
	}
	return nil
}

func checkCluster(c ClusterPolicy) error {
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
	if a := c.Adaptive; a.On() && (c.Capacity <= 0 || !finite(a.Min) || !finite(a.Max) || a.Min <= 0 || a.Min > a.Max || a.Max > MaxAmount) {
		return fmt.Errorf("cluster %q: adaptive min %v max %v: must be 0 < min <= max <= 2^53, with a capacity", c.ID, a.Min, a.Max)
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
