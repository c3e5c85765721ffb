//go:build faults

package faults

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// The partition rows: a primary, two replicas and three Sentinels, each behind a proxy that cuts
// links between groups of processes (testenv.Split), the api and reconciler on default settings.
// A row cuts at the 200th answered purchase, heals once a replica is promoted (an event), and
// checks the failover invariants: no acknowledged order lost, no id or unit sold twice.

// partitionRow runs one row: cut partitions, the Sentinels' promotion ends it. Rows run in
// parallel: each has its own servers, proxies, processes, database and broker, and spends most
// of its time on the Sentinels' timers, not the CPU.
func partitionRow(t *testing.T, name string, cut func(s *sale)) {
	t.Parallel()
	s := newSale(t, saleOptions{topology: split})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 150)
	users := s.login("n", 800)
	sale := s.runInBackground(workload{users: users, items: itemIDs(items), keyed: func(int) bool { return true },
		workers: 32, patient: patience})
	s.waitFor("200 purchases answered", 3*time.Minute, func() bool { return s.purchases(time.Time{}) >= 200 })
	old := s.split.Primary
	cutAt := time.Now()
	cut(s)
	s.waitFor("the Sentinels to promote a replica", 90*time.Second, func() bool {
		p := s.split.SentinelPrimary()
		return p != nil && p != old
	})
	s.split.Net.Heal()
	healed := time.Now()
	t.Logf("cut at %s; a replica promoted after %.1f s", cutAt.Format("15:04:05.000"), healed.Sub(cutAt).Seconds())
	s.split.WaitReplicated(t, 90*time.Second)
	t.Logf("every server in step %.1f s after the cut", time.Since(cutAt).Seconds())
	s.wait(sale)
	t.Logf("the shoppers finished %.1f s after the cut", time.Since(cutAt).Seconds())
	s.reportRefusals(name, cutAt)
	s.checkFailoverRow(name, items, cutAt, true)
}

// (1) {api, A, B} | {C, Sentinels}: A keeps B, the api loses the Sentinels, they promote C.
func TestPartitionPrimaryKeepsOneReplica(t *testing.T) {
	partitionRow(t, "Partition: {api, A, B} / {C, Sentinels}", func(s *sale) {
		a, b, c := s.split.Primary, s.split.Replicas[0], s.split.Replicas[1]
		s.split.Net.Cut([]testenv.Group{testenv.APIGroup, s.split.Group(a), s.split.Group(b)},
			[]testenv.Group{s.split.Group(c), testenv.SentinelsGroup})
	})
}

// (2) A alone cut off; the api still reaches A and the Sentinels.
func TestPartitionPrimaryAlone(t *testing.T) {
	partitionRow(t, "Partition: A alone cut off, api reaching A and the Sentinels", func(s *sale) {
		a, b, c := s.split.Primary, s.split.Replicas[0], s.split.Replicas[1]
		s.split.Net.Cut([]testenv.Group{s.split.Group(a)},
			[]testenv.Group{s.split.Group(b), s.split.Group(c), testenv.SentinelsGroup})
	})
}

// (3) The api and A cut off from everything else.
func TestPartitionAPIWithPrimary(t *testing.T) {
	partitionRow(t, "Partition: {api, A} / {B, C, Sentinels}", func(s *sale) {
		a, b, c := s.split.Primary, s.split.Replicas[0], s.split.Replicas[1]
		s.split.Net.Cut([]testenv.Group{testenv.APIGroup, s.split.Group(a)},
			[]testenv.Group{s.split.Group(b), s.split.Group(c), testenv.SentinelsGroup})
	})
}

// (4) One replica killed (-9), then back: changes wait for it until it leaves the ack set, go on
// with the other, and wait for it again once it is back. It stays down until every Sentinel
// lists it s_down and purchases were acknowledged since, so both states of a dead replica are
// gone through whatever the machine's speed.
func TestReplicaKilledAndBack(t *testing.T) {
	const outage = 15 * time.Second
	t.Parallel()
	s := newSale(t, saleOptions{topology: split})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 150)
	users := s.login("r", 800)
	sale := s.runInBackground(workload{users: users, items: itemIDs(items), keyed: func(int) bool { return true },
		workers: 8, patient: patience})
	s.waitFor("200 purchases answered", 3*time.Minute, func() bool { return s.purchases(time.Time{}) >= 200 })
	victim := s.split.Replicas[0]
	killed := time.Now()
	victim.Kill()
	s.waitFor("purchases acknowledged without the dead replica", 60*time.Second, func() bool {
		return s.created(killed) >= 20
	})
	t.Logf("the sale went on %.1f s after the kill", time.Since(killed).Seconds())
	s.waitFor("every Sentinel to list the dead replica s_down", 60*time.Second, func() bool { return s.split.ListedDown(victim) })
	down := time.Now()
	s.waitFor("purchases acknowledged with the replica listed down", 60*time.Second, func() bool {
		return s.created(down) >= 20 || s.doneBuying(sale)
	})
	if rest := outage - time.Since(killed); rest > 0 {
		time.Sleep(rest) // the outage's length is the scenario, not a wait for something to happen
	}
	victim.Start()
	back := time.Now()
	t.Logf("the replica was down %.1f s", back.Sub(killed).Seconds())
	s.split.WaitReplicated(t, 90*time.Second)
	s.waitFor("purchases acknowledged with the replica back", 60*time.Second, func() bool { return s.created(back) >= 1 || s.doneBuying(sale) })
	s.wait(sale)
	s.reportRefusals("Replica killed, then back", killed)
	s.checkFailoverRow("Replica killed, then back", items, killed, false)
}

// created counts purchases answered 201 that began after since.
func (s *sale) created(since time.Time) int {
	n := 0
	for _, c := range s.shop.Calls() {
		if c.Kind == "purchase" && c.Status == 201 && !c.Started.Before(since) {
			n++
		}
	}
	return n
}

// doneBuying reports whether the shoppers have finished.
func (s *sale) doneBuying(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

var refusedRE = regexp.MustCompile(`changes are accepted again","refused_seconds":"([0-9.]+)"`)

// reportRefusals logs how long the apis refused changes (their "changes are accepted again"
// lines, one per refusal period) and the shoppers' view of it (the first to the last purchase
// answered 503 from the fault on), for the row's note.
func (s *sale) reportRefusals(name string, fault time.Time) {
	s.t.Helper()
	var seconds float64
	periods := 0
	for _, p := range s.apis {
		b, err := os.ReadFile(p.Log)
		if err != nil {
			s.t.Fatal(err)
		}
		for _, m := range refusedRE.FindAllSubmatch(b, -1) {
			v, _ := strconv.ParseFloat(string(m[1]), 64)
			seconds += v
			periods++
		}
	}
	var first, last time.Time
	for _, c := range s.shop.Calls() {
		if c.Kind != "purchase" || c.Status != 503 || c.Started.Before(fault) {
			continue
		}
		if first.IsZero() || c.Started.Before(first) {
			first = c.Started
		}
		if end := c.Started.Add(c.Took); end.After(last) {
			last = end
		}
	}
	span := 0.0
	if !first.IsZero() {
		span = last.Sub(first).Seconds()
	}
	s.t.Logf("%s: the api refused changes for %.1f s in %d periods (its log); purchases answered 503 over %.1f s", name, seconds, periods, span)
}

// clusterPartitionRow is a Cluster row (5): the master of it0's slot is cut off with the api
// (and, withReplica, one of its two replicas) from the rest, until the majority side has
// promoted its other replica; then healed, and the cluster is whole again.
func clusterPartitionRow(t *testing.T, name string, withReplica bool) {
	t.Parallel()
	s := newSale(t, saleOptions{topology: splitCluster})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(6, 100)
	users := s.login("c", 800)
	sale := s.runInBackground(workload{users: users, items: itemIDs(items), keyed: func(int) bool { return true },
		workers: 32, patient: patience})
	s.waitFor("200 purchases answered", 3*time.Minute, func() bool { return s.purchases(time.Time{}) >= 200 })
	c := s.splitCl
	key := s.keys().Item("it0").Hash()
	m := c.MasterOf(c.Nodes[0], key)
	reps := c.ReplicasOf(m)
	if m == nil || len(reps) != 2 {
		t.Fatalf("the master of %s and its replicas: %v, %d replicas", key, m, len(reps))
	}
	side := []testenv.Group{testenv.APIGroup, c.Group(m)}
	if withReplica {
		side = append(side, c.Group(reps[0]))
	}
	var other []testenv.Group
	var outside *testenv.Server
	for _, n := range c.Nodes {
		if !slices.Contains(side, c.Group(n)) {
			other = append(other, c.Group(n))
			outside = n
		}
	}
	cutAt := time.Now()
	c.Net.Cut(side, other)
	s.waitFor("the majority side to promote another master for it0's slot", 90*time.Second, func() bool {
		n := c.MasterOf(outside, key)
		return n != nil && n != m
	})
	c.Net.Heal()
	t.Logf("cut at %s; another master promoted after %.1f s", cutAt.Format("15:04:05.000"), time.Since(cutAt).Seconds())
	s.waitFor("the cluster whole again", 90*time.Second, c.Healthy)
	s.wait(sale)
	s.reportRefusals(name, cutAt)
	s.checkFailoverRow(name, items, cutAt, false)
}

// (5a) Cluster: {api, a master, one of its replicas} | {the rest}.
func TestClusterPartitionMasterWithReplica(t *testing.T) {
	clusterPartitionRow(t, "Cluster partition: {api, master, one replica} / {rest}", true)
}

// (5b) Cluster: {api, a master} | {the rest}.
func TestClusterPartitionMasterAlone(t *testing.T) {
	clusterPartitionRow(t, "Cluster partition: {api, master} / {rest}", false)
}
