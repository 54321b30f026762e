package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/faultproxy"
)

func TestScheduleIsReproducible(t *testing.T) {
	a := schedule(42, "cluster", 3, 200, false)
	b := schedule(42, "cluster", 3, 200, false)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if reflect.DeepEqual(a, schedule(43, "cluster", 3, 200, false)) {
		t.Fatal("two seeds gave the same schedule")
	}
}

func TestScheduleRules(t *testing.T) {
	double := 0
	kinds := map[string]bool{}
	for _, e := range schedule(7, "sentinel", 3, 500, false) {
		if len(e.faults) == 2 {
			double++
		}
		topo := 0
		for _, f := range e.faults {
			kinds[f.kind] = true
			if f.kind == migrate {
				t.Fatalf("sentinel schedule has a slot migration: %v", e)
			}
			if (f.kind == gwKill || f.kind == gwTerm) && f.target == 0 {
				t.Fatalf("gateway 0 is stopped: %v", e)
			}
			if slices.Contains(topologyFaults, f.kind) {
				topo++
			}
			if f.hold < time.Second || f.hold > 6*time.Second {
				t.Fatalf("hold out of range: %v", e)
			}
		}
		if topo > 1 {
			t.Fatalf("two topology faults at once: %v", e)
		}
		if len(e.faults) == 2 && e.faults[0].kind == e.faults[1].kind {
			t.Fatalf("the same fault twice: %v", e)
		}
	}
	if double < 150 || double > 350 {
		t.Fatalf("%d of 500 episodes have two faults, want about half", double)
	}
	if len(kinds) != 8 {
		t.Fatalf("sentinel schedule uses %d kinds of fault, want 8: %v", len(kinds), kinds)
	}
}

func TestParseClusterNodes(t *testing.T) {
	out := `07c3 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460
67ed 127.0.0.1:30002@40002 master,fail - 0 0 2 disconnected
292f 127.0.0.1:30003@40003 slave 67ed 0 0 3 connected
`
	byPort := map[int]*node{30001: {name: "a"}, 30002: {name: "b"}, 30003: {name: "c"}}
	cns := parseClusterNodes(out, func(p int) *node { return byPort[p] })
	if len(cns) != 3 {
		t.Fatalf("%d nodes", len(cns))
	}
	if !cns[0].master || cns[0].fail || cns[0].node.name != "a" {
		t.Fatalf("first: %+v", cns[0])
	}
	if !cns[1].master || !cns[1].fail {
		t.Fatalf("second: %+v", cns[1])
	}
	if cns[2].master || cns[2].masterID != "67ed" || cns[2].node.name != "c" {
		t.Fatalf("third: %+v", cns[2])
	}
}

func TestFindInode(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0
`
	sc := bufio.NewScanner(strings.NewReader(tcp))
	if got := findInode(sc, 0xD431, 0x1F90); got != "222" {
		t.Fatalf("inode %q, want 222", got)
	}
	if got := findInode(bufio.NewScanner(strings.NewReader(tcp)), 1, 2); got != "" {
		t.Fatalf("inode %q for no socket", got)
	}
}

// echo serves an echo server until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn) error {
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return err
}

// TestPartitionCutsOnlyTheOwner: a partition of this process resets its open connection and
// refuses new ones; a partition of another process leaves it alone; healing lets it in again.
func TestPartitionCutsOnlyTheOwner(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	p.Partition(func(conn net.Conn) bool { return ownedBy(conn, os.Getppid()) })
	if err := roundTrip(c); err != nil {
		t.Fatalf("a partition of another process cut this one: %v", err)
	}
	p.Partition(func(conn net.Conn) bool { return ownedBy(conn, os.Getpid()) })
	if err := roundTrip(c); err == nil {
		t.Fatal("the open connection survived its partition")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if roundTrip(c2) == nil {
			t.Fatal("a new connection passed the partition")
		}
		c2.Close()
	}
	p.Partition(nil)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP go_goroutines x
go_goroutines 57
go_memstats_heap_inuse_bytes 1.2e+07
caddy_rate_limit_degradation_level{cluster="a"} 1
caddy_rate_limit_degradation_level{cluster="b"} 3
`))
	if err != nil || m.goroutines != 57 || m.heapInuse != 1.2e7 || m.level != 3 {
		t.Fatalf("%+v %v", m, err)
	}
	if _, err := parseMetrics(strings.NewReader("go_goroutines 5\n")); err == nil {
		t.Fatal("a scrape without the level series read as level 0")
	}
}

func TestSlope(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	if s := slope(xs, []float64{1, 3, 5, 7, 9}); s != 2 {
		t.Fatalf("slope %v, want 2", s)
	}
	if s := slope(xs, []float64{5, 5, 5, 5, 5}); s != 0 {
		t.Fatalf("slope %v, want 0", s)
	}
}

func TestSlopeLinesFlagGrowth(t *testing.T) {
	flat, growing := []sample{}, []sample{}
	for i := range 40 {
		at := time.Duration(i) * 5 * time.Second
		flat = append(flat, sample{at: at, gauges: gauges{goroutines: 100 + float64(i%3), heapInuse: 20 << 20}})
		growing = append(growing, sample{at: at, gauges: gauges{goroutines: 100 + 5*float64(i), heapInuse: 20 << 20}})
	}
	always := func(time.Duration) bool { return true }
	for _, l := range slopeLines(map[string][]sample{"gw0 #0": flat}, always) {
		if !l.ok {
			t.Fatalf("flat series flagged: %v", l)
		}
	}
	if l := slopeLines(map[string][]sample{"gw0 #0": growing}, always)[0]; l.ok {
		t.Fatalf("growing goroutines not flagged: %v", l)
	}
	// Growth only inside a fault (requests held while Redis is slow) is not a leak.
	spike := append([]sample(nil), flat...)
	for i := 30; i < 40; i++ {
		spike[i].goroutines += 200
	}
	quiet := func(at time.Duration) bool { return at < 150*time.Second }
	if l := slopeLines(map[string][]sample{"gw0 #0": spike}, quiet)[0]; !l.ok {
		t.Fatalf("a spike inside a fault window flagged: %v", l)
	}
	if l := slopeLines(map[string][]sample{"gw0 #0": spike}, always)[0]; l.ok {
		t.Fatalf("the spike, counted, not flagged: %v", l)
	}
}

func TestEpisodesInLog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ev := func(s int, msg string) logEvent {
		return logEvent{at: t0.Add(time.Duration(s) * time.Second), msg: msg}
	}
	pl := processLog{events: []logEvent{ev(1, msgEnter), ev(8, msgRecovered), ev(20, msgEnter), ev(22, msgEnter)}}
	opened, doubled, open := pl.episodes()
	if opened != 3 || doubled != 1 || !open {
		t.Fatalf("opened %d doubled %d open %v", opened, doubled, open)
	}
	if !pl.enteredBetween(t0, t0.Add(2*time.Second)) {
		t.Fatal("the WARN at 1 s is not in [0, 2]")
	}
	if pl.enteredBetween(t0.Add(10*time.Second), t0.Add(15*time.Second)) {
		t.Fatal("an episode in [10, 15] after the recovery at 8")
	}
	if !pl.enteredBetween(t0.Add(3*time.Second), t0.Add(5*time.Second)) {
		t.Fatal("[3, 5] lies inside the open episode 1–8")
	}
}

func TestQuotaLine(t *testing.T) {
	per := map[int64]int64{}
	for s := range int64(120) {
		per[s] = 30
	}
	if l := quotaLine(per, 2*time.Minute, 30, 30, nil); !l.ok {
		t.Fatalf("the quota exactly: %v", l)
	}
	per[10] += 200
	if l := quotaLine(per, 2*time.Minute, 30, 30, nil); l.ok {
		t.Fatalf("200 over the quota in a minute passed: %v", l)
	}
	ws := []window{{from: 5 * time.Second, to: 15 * time.Second}}
	if l := quotaLine(per, 2*time.Minute, 30, 30, ws); !l.ok {
		t.Fatalf("a fault window of 10 s allows 10 × 30 + 60 more: %v", l)
	}
}

func TestOverrideLine(t *testing.T) {
	s := time.Second
	rs := []*ran{{start: 10 * s, healed: 14 * s, recovery: s}} // a fault from 10 s, recovered at 15 s
	quick := change{op: "PUT", written: 2 * s, since: []seen{{gw: "gw0", at: 2*s + 200*time.Millisecond}}}
	if l := overrideLine([]change{quick}, rs); !l.ok {
		t.Fatalf("200 ms without a fault: %v", l)
	}
	slow := change{op: "PUT", written: 2 * s, since: []seen{{gw: "gw0", at: 4 * s}}}
	if l := overrideLine([]change{slow}, rs); l.ok {
		t.Fatalf("2 s without a fault passed: %v", l)
	}
	// A gateway stopped when the change was made is timed from its start.
	restarted := change{op: "PUT", written: 2 * s, since: []seen{{gw: "gw1", at: 6 * s, started: true}, {gw: "gw1", at: 6*s + 300*time.Millisecond}}}
	if l := overrideLine([]change{restarted}, rs); !l.ok {
		t.Fatalf("300 ms after its start: %v", l)
	}
	// During a fault: timed from the recovery (15 s).
	during := change{op: "DELETE", written: 11 * s, since: []seen{{gw: "gw2", at: 18 * s}}}
	if l := overrideLine([]change{during}, rs); !l.ok {
		t.Fatalf("3 s after the recovery: %v", l)
	}
	late := change{op: "DELETE", written: 11 * s, since: []seen{{gw: "gw2", at: 21 * s}}}
	if l := overrideLine([]change{late}, rs); l.ok {
		t.Fatalf("6 s after the recovery passed: %v", l)
	}
	if l := overrideLine([]change{{op: "PUT", late: []string{"gw1"}}}, rs); l.ok {
		t.Fatalf("a gateway that never took the change passed: %v", l)
	}
}

// TestScheduleNeverReloadsAStoppedGateway: no episode stops a gateway and reloads, partitions or
// stops it again at the same time (a reload of a stopped gateway fails: the harness's error, not
// the fleet's).
func TestScheduleNeverReloadsAStoppedGateway(t *testing.T) {
	for seed := range uint64(200) {
		for _, e := range schedule(seed, "cluster", 3, 60, false) {
			for i, f := range e.faults {
				if clashes(e.faults[:i], f) || clashes(e.faults[i+1:], f) {
					t.Fatalf("seed %d: episode %v runs clashing faults on one gateway", seed, e)
				}
			}
		}
	}
	stop, reload := fault{kind: gwTerm, target: 2}, fault{kind: gwReload, target: 2}
	if !clashes([]fault{stop}, reload) || !clashes([]fault{reload}, stop) {
		t.Fatal("a SIGTERM and a reload of one gateway do not clash")
	}
	if clashes([]fault{{kind: partition, target: 1}}, fault{kind: gwReload, target: 1}) ||
		clashes([]fault{stop}, fault{kind: gwReload, target: 1}) {
		t.Fatal("a reload beside a partition, or of another gateway, clashes")
	}
}
