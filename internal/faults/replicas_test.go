//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/testenv/procs"
)

// This file is the replicated Redis of the failover rows (issue 27): private redis-servers
// that replicate, three Sentinels watching a primary and its replica, and a Redis Cluster of
// three masters each with a replica. Every node keeps its port and its directory, so a node
// killed with kill -9 comes back from its AOF as the same node.

const masterName = "mymaster"

// redisNode is one private redis-server (or Sentinel) on a fixed loopback port.
type redisNode struct {
	t    *testing.T
	name string
	port int
	dir  string
	args []string // after the port and the directory
	cmd  *exec.Cmd
	done chan struct{}
}

// newRedisNode prepares a node in its own directory under root; start runs it.
func newRedisNode(t *testing.T, root, name string, args ...string) *redisNode {
	t.Helper()
	n := &redisNode{t: t, name: name, port: procs.FreePort(t), dir: filepath.Join(root, name), args: args}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.kill9()
		if t.Failed() {
			for _, f := range []string{"redis.log", "sentinel.log"} {
				if b, err := os.ReadFile(filepath.Join(n.dir, f)); err == nil {
					t.Logf("--- %s %s (last 3000 bytes):\n%s", n.name, f, procs.Tail(b, 3000))
				}
			}
		}
	})
	return n
}

func (n *redisNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// start runs the server and waits until it answers PING (a Sentinel answers it too).
func (n *redisNode) start(extra ...string) {
	n.t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(n.port), "--dir", n.dir,
		"--logfile", filepath.Join(n.dir, "redis.log")}, n.args...)
	n.cmd = exec.Command("redis-server", append(args, extra...)...)
	if err := n.cmd.Start(); err != nil {
		n.t.Fatalf("redis-server %s: %v (install it: apt-get install redis-server)", n.name, err)
	}
	done := make(chan struct{})
	go func(c *exec.Cmd) { _ = c.Wait(); close(done) }(n.cmd)
	n.done = done
	procs.WaitFor(n.t, n.name+" to answer", 20*time.Second, func() bool {
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			n.t.Fatalf("%s exited at start:\n%s", n.name, procs.Tail(b, 2000))
		default:
		}
		c := n.client()
		defer c.Close()
		return c.Ping(context.Background()).Err() == nil
	})
}

// kill9 is kill -9 of the node (nothing flushed, nothing said to its peers).
func (n *redisNode) kill9() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.done
	n.cmd = nil
}

// client is a plain connection to this node (the test's probes: INFO, DEBUG SLEEP, ROLE).
func (n *redisNode) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 30 * time.Second})
}

// info reads one field of INFO section on the node ("" when it does not answer).
func (n *redisNode) info(section, field string) string {
	c := n.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// clusterState is cluster_state of CLUSTER INFO on the node ("" when it does not answer).
func (n *redisNode) clusterState() string {
	c := n.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cluster_state:"); ok {
			return v
		}
	}
	return ""
}

// replicaArgs are the arguments of every data node of a replicated set: an AOF, DEBUG for the
// stalls, and short replication timeouts, so a primary drops a replica that stopped answering
// within 2 s (it then really falls behind: what the primary writes afterwards is not on it).
func replicaArgs(extra ...string) []string {
	return append([]string{"--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
		"--enable-debug-command", "yes", "--repl-timeout", "2", "--repl-ping-replica-period", "1",
		"--repl-diskless-sync-delay", "0"}, extra...)
}

// sentinelSet is a primary, its replica and three Sentinels (quorum 2) watching them.
type sentinelSet struct {
	t         *testing.T
	nodes     []*redisNode // [0] starts as the primary, [1] as its replica
	sentinels []*redisNode
}

// startSentinelSet starts the primary, the replica (synced) and the Sentinels (each seeing
// the replica and the other Sentinels) under root.
func startSentinelSet(t *testing.T, root string) *sentinelSet {
	t.Helper()
	ss := &sentinelSet{t: t}
	primary := newRedisNode(t, root, "redis-a", replicaArgs()...)
	replica := newRedisNode(t, root, "redis-b", replicaArgs()...)
	ss.nodes = []*redisNode{primary, replica}
	primary.start()
	replica.start("--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	procs.WaitFor(t, "the replica in sync", 30*time.Second, func() bool {
		return replica.info("replication", "master_link_status") == "up"
	})
	for i := range 3 {
		s := newRedisNode(t, root, fmt.Sprintf("sentinel-%d", i))
		// A Sentinel rewrites its configuration file: it must be its own and writable.
		conf := filepath.Join(s.dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 3000\n"+
			"sentinel parallel-syncs %[1]s 1\n", masterName, primary.port)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		ss.sentinels = append(ss.sentinels, s)
		ss.startSentinel(s, conf)
	}
	procs.WaitFor(t, "every Sentinel to see the replica and the other Sentinels", 60*time.Second, func() bool {
		for _, s := range ss.sentinels {
			m := ss.sentinelMaster(s)
			if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return false
			}
		}
		return true
	})
	return ss
}

// startSentinel runs redis-server --sentinel with its configuration file.
func (ss *sentinelSet) startSentinel(s *redisNode, conf string) {
	ss.t.Helper()
	s.cmd = exec.Command("redis-server", conf, "--sentinel", "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "sentinel.log"))
	if err := s.cmd.Start(); err != nil {
		ss.t.Fatalf("redis-server --sentinel: %v", err)
	}
	done := make(chan struct{})
	go func(c *exec.Cmd) { _ = c.Wait(); close(done) }(s.cmd)
	s.done = done
	procs.WaitFor(ss.t, s.name+" to answer", 20*time.Second, func() bool {
		c := s.client()
		defer c.Close()
		return c.Ping(context.Background()).Err() == nil
	})
}

// sentinelMaster is SENTINEL MASTER mymaster as one Sentinel sees it (nil when it does not answer).
func (ss *sentinelSet) sentinelMaster(s *redisNode) map[string]string {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := c.Master(ctx, masterName).Result()
	if err != nil {
		return nil
	}
	return m
}

// sentinelAddrs is FLASHSALE_REDIS_SENTINELS.
func (ss *sentinelSet) sentinelAddrs() string {
	var a []string
	for _, s := range ss.sentinels {
		a = append(a, s.addr())
	}
	return strings.Join(a, ",")
}

// primaryAddr is the primary every Sentinel names ("" while they disagree or do not answer).
func (ss *sentinelSet) primaryAddr() string {
	var addr string
	for _, s := range ss.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hp, err := c.GetMasterAddrByName(ctx, masterName).Result()
		cancel()
		c.Close()
		if err != nil || len(hp) != 2 {
			return ""
		}
		a := hp[0] + ":" + hp[1]
		if addr != "" && a != addr {
			return ""
		}
		addr = a
	}
	return addr
}

// node is the data node at addr.
func (ss *sentinelSet) node(addr string) *redisNode {
	for _, n := range ss.nodes {
		if n.addr() == addr {
			return n
		}
	}
	ss.t.Fatalf("no node at %q", addr)
	return nil
}

// other is the data node that is not n.
func (ss *sentinelSet) other(n *redisNode) *redisNode {
	if ss.nodes[0] == n {
		return ss.nodes[1]
	}
	return ss.nodes[0]
}

// client is a failover client for the checks: it reads whichever node is the primary now.
func (ss *sentinelSet) client() *redis.Client {
	var addrs []string
	for _, s := range ss.sentinels {
		addrs = append(addrs, s.addr())
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: masterName, SentinelAddrs: addrs,
		MaxRetries: 5, ReadTimeout: 10 * time.Second})
}

// waitReplicated waits until the primary has a replica online and in step with it.
func (ss *sentinelSet) waitReplicated(within time.Duration) {
	ss.t.Helper()
	procs.WaitFor(ss.t, "the primary to have its replica back", within, func() bool {
		addr := ss.primaryAddr()
		if addr == "" {
			return false
		}
		p := ss.node(addr)
		return p.info("replication", "role") == "master" && p.info("replication", "connected_slaves") == "1" &&
			ss.other(p).info("replication", "master_link_status") == "up"
	})
}

// replicatedCluster is a Redis Cluster of three masters, each with a replica.
type replicatedCluster struct {
	t     *testing.T
	nodes []*redisNode
}

// startReplicatedCluster starts six cluster nodes (AOF, node timeout 1 s) and joins them with
// redis-cli --cluster create --cluster-replicas 1.
func startReplicatedCluster(t *testing.T, root string) *replicatedCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not found; install it: apt-get install -y redis-tools")
	}
	rc := &replicatedCluster{t: t}
	for i := range 6 {
		n := newRedisNode(t, root, fmt.Sprintf("node-%d", i), replicaArgs("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000")...)
		n.start()
		rc.nodes = append(rc.nodes, n)
	}
	args := []string{"--cluster", "create"}
	for _, n := range rc.nodes {
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	procs.WaitFor(t, "the cluster ok, every master with its replica in sync", 60*time.Second, rc.healthy)
	return rc
}

// addrs is FLASHSALE_REDIS_ADDRS: every node.
func (rc *replicatedCluster) addrs() string {
	var a []string
	for _, n := range rc.nodes {
		a = append(a, n.addr())
	}
	return strings.Join(a, ",")
}

// client is a cluster client for the checks.
func (rc *replicatedCluster) client() *redis.ClusterClient {
	var a []string
	for _, n := range rc.nodes {
		a = append(a, n.addr())
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: a, MaxRetries: 10, ReadTimeout: 10 * time.Second})
}

// masterOf is the node that serves key's slot now, as a fresh cluster client learns it (nil
// while it cannot tell).
func (rc *replicatedCluster) masterOf(key string) *redisNode {
	cc := rc.client()
	defer cc.Close()
	m, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		return nil
	}
	for _, n := range rc.nodes {
		if n.addr() == m.Options().Addr {
			return n
		}
	}
	return nil
}

// healthy reports whether the cluster is ok on every live node and has three masters, each
// with a replica in step.
func (rc *replicatedCluster) healthy() bool {
	masters := 0
	for _, n := range rc.nodes {
		if n.cmd == nil {
			return false
		}
		if n.clusterState() != "ok" {
			return false
		}
		switch n.info("replication", "role") {
		case "master":
			if n.info("replication", "connected_slaves") != "1" {
				return false
			}
			masters++
		case "slave":
			if n.info("replication", "master_link_status") != "up" {
				return false
			}
		default:
			return false
		}
	}
	return masters == 3
}
