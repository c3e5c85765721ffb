//go:build faults

package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

// The failover rows: Redis with replicas fails over mid-sale, and no order the api
// acknowledged is lost, no unit is sold twice, no order id names two orders. Every api and the
// reconciler require one replica to hold a change before it is acknowledged or relayed.
const ackEnv = "FLASHSALE_REDIS_ACK_REPLICAS=1"

// A purchase answered 503 (or not at all) is sent again with its key for up to this long:
// longer than any failover of the rows.
const patience = 45 * time.Second

// The replica falls behind (DEBUG SLEEP; the primary drops it after its 2 s repl-timeout), the
// primary is killed (-9) meanwhile, the Sentinels promote the lagging replica, and the old
// primary comes back from its AOF as its replica, dropping what only it had. 2,000 shoppers
// with Idempotency-Keys.
func TestSentinelLaggingReplicaPromoted(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting on failover timers (partitionRow)
	s := newSale(t, saleOptions{topology: sentinel, extraEnv: []string{ackEnv}})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 400)
	users := s.login("l", 2000)
	sale := s.runInBackground(workload{users: users, items: itemIDs(items), keyed: func(int) bool { return true },
		workers: 32, patient: patience})

	s.waitFor("300 purchases answered", 3*time.Minute, func() bool { return s.purchases(time.Time{}) >= 300 })
	primary, replica := s.sentinels.Primary, s.sentinels.Replicas[0]
	asleep := make(chan struct{})
	c := replica.Client()
	go func() {
		defer close(asleep)
		// The reply comes when the replica wakes; an error here only means the sleep was cut short.
		_ = c.Do(context.Background(), "DEBUG", "SLEEP", "8").Err()
	}()
	s.waitFor("the primary to drop its sleeping replica", 30*time.Second, func() bool {
		return primary.Info("replication", "connected_slaves") == "0"
	})
	// The sale goes on against the lone primary: what it is asked now no replica will hold.
	dropped := time.Now()
	s.waitFor("20 purchases answered by the lone primary", 30*time.Second, func() bool { return s.purchases(dropped) >= 20 })
	select {
	case <-asleep:
		t.Log("the replica woke before the primary was killed: it may have caught up")
	default:
		t.Log("the primary is killed while its replica sleeps")
	}
	killed := time.Now()
	primary.Kill()
	s.waitFor("the Sentinels to promote the replica", 90*time.Second, func() bool {
		return s.sentinels.SentinelPrimary() == replica.Addr
	})
	promoted := time.Now()
	<-asleep
	primary.Start() // from its AOF, a primary again until the Sentinels make it a replica
	s.sentinels.WaitReplicated(t, 90*time.Second)
	if s.sentinels.Primary != replica {
		t.Fatalf("the primary is %s after the failover, want the promoted replica %s", s.sentinels.Primary.Addr, replica.Addr)
	}
	t.Logf("kill -9 at %s; promoted after %.1f s; the old primary in step as a replica after %.1f s",
		killed.Format("15:04:05.000"), promoted.Sub(killed).Seconds(), time.Since(killed).Seconds())
	s.wait(sale)
	s.checkFailoverRow("Sentinel: lagging replica promoted after primary kill -9", items, killed, true)
}

// A planned failover (SENTINEL FAILOVER) mid-sale: the replica is promoted while the primary
// still takes writes, and the old primary is made its replica.
func TestSentinelPlannedFailover(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting on failover timers (partitionRow)
	s := newSale(t, saleOptions{topology: sentinel, extraEnv: []string{ackEnv}})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 250)
	users := s.login("p", 1000)
	sale := s.runInBackground(workload{users: users, items: itemIDs(items), keyed: func(int) bool { return true },
		workers: 32, patient: patience})

	s.waitFor("300 purchases answered", 3*time.Minute, func() bool { return s.purchases(time.Time{}) >= 300 })
	replica := s.sentinels.Replicas[0]
	c := s.sentinels.Sentinels[0].Client()
	started := time.Now()
	if err := c.Do(context.Background(), "SENTINEL", "FAILOVER", s.sentinels.MasterName).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	s.waitFor("the Sentinels to name the replica primary", 90*time.Second, func() bool {
		return s.sentinels.SentinelPrimary() == replica.Addr
	})
	s.sentinels.WaitReplicated(t, 90*time.Second)
	t.Logf("the old primary in step as a replica %.1f s after SENTINEL FAILOVER", time.Since(started).Seconds())
	s.wait(sale)
	s.checkFailoverRow("Sentinel: planned SENTINEL FAILOVER", items, started, true)
}

// A Redis Cluster of three masters, each with a replica: the master of an item on sale is killed
// (kill -9) mid-sale, its replica takes its slots (cluster-node-timeout 1 s), the killed node
// comes back from its AOF as the new master's replica, and the sale goes on.
func TestClusterMasterKilled(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting on failover timers (partitionRow)
	s := newSale(t, saleOptions{topology: cluster, extraEnv: []string{ackEnv}})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(6, 170)
	users := s.login("c", 1000)
	sale := s.runInBackground(workload{users: users, items: itemIDs(items), keyed: func(int) bool { return true },
		workers: 32, patient: patience})

	s.waitFor("300 purchases answered", 3*time.Minute, func() bool { return s.purchases(time.Time{}) >= 300 })
	key := s.keys().Item("it0").Hash()
	victim := s.cluster.MasterOf(key)
	if victim == nil {
		t.Fatalf("no node of the cluster serves %s", key)
	}
	killed := time.Now()
	victim.Kill()
	s.waitFor("a replica to take the killed master's slots", 90*time.Second, func() bool {
		for _, n := range s.cluster.Nodes {
			if n != victim && n.ClusterInfo("cluster_state") != "ok" {
				return false
			}
		}
		m := s.cluster.MasterOf(key)
		return m != nil && m != victim
	})
	promoted := time.Now()
	victim.Start()
	s.waitFor("the cluster whole again, the old master a replica", 90*time.Second, s.cluster.Healthy)
	if role := victim.Info("replication", "role"); role != "slave" {
		t.Fatalf("the killed master came back as %q, want a replica", role)
	}
	t.Logf("kill -9 at %s; slots taken over after %.1f s; whole again after %.1f s",
		killed.Format("15:04:05.000"), promoted.Sub(killed).Seconds(), time.Since(killed).Seconds())
	s.wait(sale)
	s.checkFailoverRow("Redis Cluster: a master kill -9, its replica promoted", items, killed, false)
}

// runInBackground runs the workload's shoppers in their own goroutine, so the test's goroutine
// drives the fault on events; wait waits for them.
func (s *sale) runInBackground(w workload) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(w)
	}()
	return done
}

func (s *sale) wait(done chan struct{}) {
	s.t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		s.t.Fatal("the shoppers did not finish within 5 minutes")
	}
}

// purchases counts the purchase calls answered (any answer) that began after since.
func (s *sale) purchases(since time.Time) int {
	n := 0
	for _, c := range s.shop.Calls() {
		if c.Kind == "purchase" && !c.Started.Before(since) {
			n++
		}
	}
	return n
}

// checkFailoverRow checks a failover row beyond the matrix's invariants: acknowledged payments
// and cancellations held, no order id answered twice, no conflict parked, the sale sold again
// after the fault, and (Sentinel) the apis counted the switch. It prints the row.
func (s *sale) checkFailoverRow(name string, items map[string]int, fault time.Time, sentinels bool) {
	s.t.Helper()
	t := s.t
	s.felt(name)
	var replies503 int
	owners := 0
	f := s.verifyThen(items, func(ledger procs.Ledger) {
		owner := map[string]string{}
		for _, c := range s.shop.Calls() {
			if c.Status == 503 {
				replies503++
			}
			if c.Status != 200 && c.Status != 201 || c.OrderID == "" {
				continue
			}
			switch c.Kind {
			case "purchase":
				who := c.User + " " + c.Item
				if o, ok := owner[c.OrderID]; ok && o != who {
					t.Errorf("order id %s was answered to %s and to %s", c.OrderID, o, who)
				}
				owner[c.OrderID] = who
			case "pay", "cancel":
				want := map[string]string{"pay": "paid", "cancel": "cancelled"}[c.Kind]
				if o, ok := ledger.Orders[c.OrderID]; !ok || o.Status != want {
					t.Errorf("%s of %s was acknowledged, Redis holds %+v", c.Kind, c.OrderID, o)
				}
			}
		}
		owners = len(owner)
	})
	if s.recovery(fault) == 0 {
		t.Errorf("no purchase begun after the fault got a real answer: the sale did not go on")
	}
	// Time to recover: from the fault to the end of the last purchase after it that was refused
	// (503) or got no certain answer; from then on the sale sold again.
	for _, c := range s.shop.Calls() {
		if c.Kind == "purchase" && !c.Started.Before(fault) && (c.Status == 503 || c.Unknown()) {
			f.recover = max(f.recover, c.Started.Add(c.Took).Sub(fault))
		}
	}
	var dead int
	if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM dead_letters`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("the record parked %d events (a conflict means an order id named two orders)", dead)
	}
	if sentinels {
		var switches float64
		for _, p := range s.apis {
			switches += metric(t, p.URL, "flashsale_redis_failovers_total")
		}
		if switches < 1 {
			t.Errorf("flashsale_redis_failovers_total is %v on the apis after a failover", switches)
		}
	}
	var late int
	for _, c := range s.shop.Calls() {
		if c.Kind == "purchase" && c.Status == 201 && c.Started.Add(c.Took).After(fault) {
			late++
		}
	}
	t.Logf("%d purchases were answered 201 after the fault began", late)
	t.Logf("%s: acknowledged orders %d, lost %d, answers 503 %d (outcome unknown %d), time to recover %.1f s",
		name, owners, f.lost, replies503, f.unknown, f.recover.Seconds())
	report(t, strings.ReplaceAll(name, "|", "/"), f)
}
