package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server (or Sentinel) process of the test's own, which the test may
// kill (-9), stop (SIGSTOP) and start again on the same port and data directory.
type Server struct {
	Addr string
	Dir  string
	args []string
	cmd  *exec.Cmd
	t    testing.TB
}

// StartServer runs a private redis-server with args (after the port, bind, dir and daemonize
// settings) in its own directory; it is killed when the test ends.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, t: t,
		args: append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
			"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log")}, args...)}
	s.Start()
	t.Cleanup(func() { s.Kill() })
	return s
}

// Start starts the process (again) and waits until it answers PING.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command(redisServerBinary(s.t), s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("testenv: start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	WaitFor(s.t, "redis-server on "+s.Addr+" answers", 10*time.Second, func() bool {
		return c.Ping(context.Background()).Err() == nil
	})
}

// Kill ends the process with SIGKILL (kill -9) and reaps it; a no-op when it is not running.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process must run to die
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the process (SIGSTOP): it keeps its connections but answers nothing, as a
// server stalled by the machine would; Resume lets it go on.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Client is a plain client of this one server (no failover), closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Replicated is a private primary with replicas (both with AOF, --enable-debug-command so a
// test can DEBUG SLEEP a replica) and, when asked, Sentinels watching them as MasterName.
type Replicated struct {
	Primary    *Server
	Replicas   []*Server
	Sentinels  []*Server
	MasterName string
}

// ReplicatedRedis starts a primary and n replicas of it and waits until every replica is in
// sync. extra are more redis-server arguments for all of them.
func ReplicatedRedis(t testing.TB, n int, extra ...string) *Replicated {
	t.Helper()
	base := append([]string{"--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
		"--enable-debug-command", "yes", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}, extra...)
	r := &Replicated{Primary: StartServer(t, base...), MasterName: "mymaster"}
	host, port := hostPort(r.Primary.Addr)
	for range n {
		r.Replicas = append(r.Replicas, StartServer(t, append(base, "--replicaof", host, port)...))
	}
	r.WaitInSync(t, r.Primary, n)
	return r
}

// WaitInSync waits until primary has at least n replicas online (INFO replication).
func (r *Replicated) WaitInSync(t testing.TB, primary *Server, n int) {
	t.Helper()
	c := primary.Client()
	WaitFor(t, fmt.Sprintf("%d replicas of %s online", n, primary.Addr), 30*time.Second, func() bool {
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Count(info, "state=online") >= n
	})
}

// WithSentinels starts count Sentinels (quorum: a majority) monitoring the primary as
// r.MasterName, with a 1 s down-after and a short failover timeout, and waits until each of
// them knows every replica and the other Sentinels.
func (r *Replicated) WithSentinels(t testing.TB, count int) []string {
	t.Helper()
	host, port := hostPort(r.Primary.Addr)
	quorum := count/2 + 1
	var addrs []string
	for range count {
		dir := t.TempDir()
		sport := freePort(t)
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 5000\n"+
			"sentinel parallel-syncs %s 1\n",
			sport, dir, filepath.Join(dir, "sentinel.log"), r.MasterName, host, port, quorum,
			r.MasterName, r.MasterName, r.MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(sport), Dir: dir, t: t, args: []string{conf, "--sentinel"}}
		s.Start()
		t.Cleanup(func() { s.Kill() })
		r.Sentinels = append(r.Sentinels, s)
		addrs = append(addrs, s.Addr)
	}
	for _, s := range r.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		WaitFor(t, "Sentinel "+s.Addr+" knows the replicas and the other Sentinels", 30*time.Second, func() bool {
			ctx := context.Background()
			reps, err := sc.Replicas(ctx, r.MasterName).Result()
			if err != nil || len(reps) < len(r.Replicas) {
				return false
			}
			others, err := sc.Sentinels(ctx, r.MasterName).Result()
			return err == nil && len(others) >= count-1
		})
		sc.Close()
	}
	return addrs
}

// Failover asks a Sentinel for a failover (SENTINEL FAILOVER) and waits until every Sentinel
// names a new primary, which it returns (a *Server of r).
func (r *Replicated) Failover(t testing.TB) *Server {
	t.Helper()
	old := r.Primary.Addr
	sc := redis.NewSentinelClient(&redis.Options{Addr: r.Sentinels[0].Addr, MaxRetries: -1})
	defer sc.Close()
	if err := sc.Failover(context.Background(), r.MasterName).Err(); err != nil {
		t.Fatalf("testenv: SENTINEL FAILOVER: %v", err)
	}
	return r.WaitNewPrimary(t, old)
}

// WaitNewPrimary waits until every Sentinel names a primary other than old, makes it
// r.Primary (the old one joins r.Replicas) and returns it.
func (r *Replicated) WaitNewPrimary(t testing.TB, old string) *Server {
	t.Helper()
	var addr string
	for _, s := range r.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		WaitFor(t, "Sentinel "+s.Addr+" names a new primary", 60*time.Second, func() bool {
			a, err := sc.GetMasterAddrByName(context.Background(), r.MasterName).Result()
			if err != nil || len(a) != 2 {
				return false
			}
			addr = a[0] + ":" + a[1]
			return addr != old
		})
		sc.Close()
	}
	all := append([]*Server{r.Primary}, r.Replicas...)
	r.Replicas = r.Replicas[:0]
	for _, s := range all {
		if s.Addr == addr {
			r.Primary = s
		} else {
			r.Replicas = append(r.Replicas, s)
		}
	}
	if r.Primary.Addr != addr {
		t.Fatalf("testenv: the Sentinels name %s, which is none of this test's servers", addr)
	}
	return r.Primary
}

// WaitFor polls cond every 20 ms until it holds, failing the test with what after d.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: waited %s for: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hostPort(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// ReplicatedCluster is a private Redis Cluster of three masters, each with one replica (AOF,
// a 2 s node timeout, so a killed master's replica is promoted within seconds).
type ReplicatedCluster struct {
	Nodes []*Server // the first three start as masters
}

// ClusterWithReplicas starts a 3-master Redis Cluster with one replica per master and waits
// until the cluster is ok and every replica is in sync.
func ClusterWithReplicas(t testing.TB) *ReplicatedCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("testenv: redis-cli not found; install it: apt-get install -y redis-tools")
	}
	c := &ReplicatedCluster{}
	var addrs []string
	for range 6 {
		dir := t.TempDir()
		s := StartServer(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000", "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
			"--enable-debug-command", "yes")
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range c.Nodes {
		cl := s.Client()
		WaitFor(t, "cluster ok and in sync on "+s.Addr, 60*time.Second, func() bool {
			ctx := context.Background()
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			rep, err := cl.Info(ctx, "replication").Result()
			return err == nil && (strings.Contains(rep, "role:slave") && strings.Contains(rep, "master_link_status:up") ||
				strings.Contains(rep, "role:master") && strings.Contains(rep, "state=online"))
		})
	}
	return c
}

// Masters returns the addresses of the nodes that are masters now.
func (c *ReplicatedCluster) Masters(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, s := range c.Nodes {
		if s.cmd == nil {
			continue
		}
		info, err := s.Client().Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:master") {
			out = append(out, s.Addr)
		}
	}
	return out
}

// Node returns the node with address addr.
func (c *ReplicatedCluster) Node(t testing.TB, addr string) *Server {
	t.Helper()
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	t.Fatalf("testenv: no cluster node %s", addr)
	return nil
}
