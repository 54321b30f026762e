package connlimit

import (
	"sync"
	"testing"
)

// TestSlotsBurstStaysWithinLimit: two instances hit by a burst at once (8 requests each for a
// limit of 4) admit the limit and no more, and every rejection shows the fleet full (its
// current count, local plus the others' holdings, at the limit). A request whose lease was
// granted in full but whose slots its instance's other requests took first leases again
// (growOnce): decided locally beyond the holding, it would put the fleet over its limit.
func TestSlotsBurstStaysWithinLimit(t *testing.T) {
	for round := range 50 {
		f := twoInstances(t, 4)
		ca, cb := f.ca, f.cb
		var mu sync.Mutex
		var held []*Ticket
		var wg sync.WaitGroup
		for _, c := range []*Counter{ca, cb} {
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tk, _ := c.Acquire("burst", 0)
					mu.Lock()
					defer mu.Unlock()
					if tk != nil {
						held = append(held, tk)
						return
					}
					if l, cur := c.Limits("burst", 0); cur < l {
						t.Errorf("round %d: refused while the fleet shows %d of %d", round, cur, l)
					}
				}()
			}
		}
		wg.Wait()
		if len(held) != 4 {
			t.Fatalf("round %d: %d admitted by the burst, want the limit, 4", round, len(held))
		}
		for _, tk := range held {
			tk.Release()
		}
	}
}
