package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/redisconn"
)

// Server is a private redis-server (or Sentinel) process of the test's own, which the test may
// kill (-9), stop (SIGSTOP) and start again on the same port and data directory (so a server
// killed with an AOF comes back from it as the same node). When the test fails, its log's tail
// is in the test's output.
type Server struct {
	Addr string
	Dir  string
	args []string
	cmd  *exec.Cmd
	done chan struct{} // closed when the running process has exited
	t    testing.TB
}

// StartServer runs a private redis-server with args (after the port, bind, dir and daemonize
// settings; a later setting of the same name wins) in its own directory; it is killed when the
// test ends.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServerOn(t, freePort(t), args...)
}

// startServerOn is StartServer on a given port.
func startServerOn(t testing.TB, port int, args ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, t: t,
		args: append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
			"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log")}, args...)}
	s.cleanup()
	s.Start()
	return s
}

// cleanup kills the server when the test ends, first logging its log's tail if the test failed.
func (s *Server) cleanup() {
	s.t.Cleanup(func() {
		s.Kill()
		if s.t.Failed() {
			if b, err := os.ReadFile(filepath.Join(s.Dir, s.logName())); err == nil {
				s.t.Logf("--- %s %s (last 3000 bytes):\n%s", s.Addr, s.logName(), tail(b, 3000))
			}
		}
	})
}

func (s *Server) logName() string {
	if slices.Contains(s.args, "--sentinel") {
		return "sentinel.log"
	}
	return "redis.log"
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Start starts the process (again, with the same arguments) and waits until it answers PING
// (a Sentinel answers it too); a process that exits at once fails the test with its log.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command(redisServerBinary(s.t), s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("testenv: start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func(c *exec.Cmd) { _ = c.Wait(); close(done) }(s.cmd)
	s.done = done
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	WaitFor(s.t, "redis-server on "+s.Addr+" answers", 20*time.Second, func() bool {
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(s.Dir, s.logName()))
			s.t.Fatalf("testenv: redis-server on %s exited at start:\n%s", s.Addr, tail(b, 2000))
		default:
		}
		return c.Ping(context.Background()).Err() == nil
	})
}

// Running reports whether the process was started and not killed.
func (s *Server) Running() bool { return s.cmd != nil }

// Kill ends the process with SIGKILL (kill -9: nothing flushed, nothing said to its peers) and
// reaps it; a no-op when it is not running.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process must run to die
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause stops the process (SIGSTOP): it keeps its connections but answers nothing, as a
// server stalled by the machine would; Resume lets it go on.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Client is a plain client of this one server (no failover), closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 30 * time.Second}) // long enough for the reply of a DEBUG SLEEP
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Info is one field of INFO section on the server ("" when it does not answer).
func (s *Server) Info(section, field string) string {
	return s.field(section, field, func(ctx context.Context, c *redis.Client) (string, error) {
		return c.Info(ctx, section).Result()
	})
}

// ClusterInfo is one field of CLUSTER INFO on the server ("" when it does not answer).
func (s *Server) ClusterInfo(field string) string {
	return s.field("cluster", field, func(ctx context.Context, c *redis.Client) (string, error) {
		return c.ClusterInfo(ctx).Result()
	})
}

// field asks the server (on a connection of its own, so a probe never waits behind a test's
// command) and returns field's value from the "field:value" lines of the reply.
func (s *Server) field(section, field string, ask func(context.Context, *redis.Client) (string, error)) string {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reply, err := ask(ctx, c)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(reply, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
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
// sync. extra are more redis-server arguments for all of them (a later setting of the same
// name wins: "--repl-timeout", "2" makes a primary drop a stalled replica within 2 s).
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

// WaitInSync waits until primary has at least n replicas online (INFO replication) that
// acknowledge a write (WAIT).
func (r *Replicated) WaitInSync(t testing.TB, primary *Server, n int) {
	t.Helper()
	c := primary.Client()
	WaitFor(t, fmt.Sprintf("%d replicas of %s online and acknowledging", n, primary.Addr), 30*time.Second, func() bool {
		ctx := context.Background()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil || strings.Count(info, "state=online") < n {
			return false
		}
		pipe := c.Pipeline()
		pipe.Set(ctx, "testenv:in-sync", Token(4), time.Minute)
		acked := pipe.Do(ctx, "WAIT", n, 1000)
		_, _ = pipe.Exec(ctx)
		got, err := acked.Int64()
		return err == nil && got >= int64(n)
	})
}

// WithSentinels starts count Sentinels (quorum: a majority) monitoring the primary as
// r.MasterName, with a 3 s down-after (three pings, so one late PING from a busy new primary
// does not fail it over again) and a 3 s failover timeout, waits until each knows every
// replica and the other Sentinels, and returns their addresses.
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
			"sentinel down-after-milliseconds %s 3000\n"+
			"sentinel failover-timeout %s 3000\n"+
			"sentinel parallel-syncs %s 1\n",
			sport, dir, filepath.Join(dir, "sentinel.log"), r.MasterName, host, port, quorum,
			r.MasterName, r.MasterName, r.MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(sport), Dir: dir, t: t, args: []string{conf, "--sentinel"}}
		s.cleanup()
		s.Start()
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
			for _, rep := range reps {
				if rep["flags"] != "slave" || rep["master-link-status"] != "ok" {
					return false
				}
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
	// NOGOODSLAVE until the Sentinel has seen a replica fit to promote (its INFO is recent).
	var err error
	WaitFor(t, "SENTINEL FAILOVER accepted", 60*time.Second, func() bool {
		err = sc.Failover(context.Background(), r.MasterName).Err()
		if err != nil && !strings.Contains(err.Error(), "NOGOODSLAVE") {
			t.Fatalf("testenv: SENTINEL FAILOVER: %v", err)
		}
		return err == nil
	})
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

// SentinelPrimary is the primary every Sentinel names ("" while they disagree or one does not
// answer).
func (r *Replicated) SentinelPrimary() string {
	var addr string
	for _, s := range r.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hp, err := sc.GetMasterAddrByName(ctx, r.MasterName).Result()
		cancel()
		sc.Close()
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

// Server is the primary or replica of r at addr (nil when none is).
func (r *Replicated) Server(addr string) *Server {
	for _, s := range append([]*Server{r.Primary}, r.Replicas...) {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// WaitReplicated waits up to d until the Sentinels agree on a primary that has every other
// server of r online as its replica, in step (each replica's link up), and makes it r.Primary.
func (r *Replicated) WaitReplicated(t testing.TB, d time.Duration) {
	t.Helper()
	WaitFor(t, "the Sentinels' primary to have every other server as its replica, in step", d, func() bool {
		p := r.Server(r.SentinelPrimary())
		others, ok := inStepUnder(p, append([]*Server{r.Primary}, r.Replicas...))
		if ok {
			r.Primary, r.Replicas = p, others
		}
		return ok
	})
}

// inStepUnder reports whether p is a primary with every other server of all as a connected
// replica whose link is up, and returns those others.
func inStepUnder(p *Server, all []*Server) ([]*Server, bool) {
	if p == nil || p.Info("replication", "role") != "master" {
		return nil, false
	}
	var others []*Server
	for _, s := range all {
		if s != p {
			others = append(others, s)
		}
	}
	if p.Info("replication", "connected_slaves") != strconv.Itoa(len(others)) {
		return nil, false
	}
	for _, s := range others {
		if s.Info("replication", "master_link_status") != "up" {
			return nil, false
		}
	}
	return others, true
}

// FailoverClient is a client that follows the Sentinels to whichever server is the primary
// now, closed when the test ends.
func (r *Replicated) FailoverClient(t testing.TB) *redis.Client {
	var addrs []string
	for _, s := range r.Sentinels {
		addrs = append(addrs, s.Addr)
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: r.MasterName, SentinelAddrs: addrs,
		MaxRetries: 5, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
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
// until the cluster is ok and every replica is in sync. extra are more redis-server arguments
// for every node (a later setting of the same name wins: "--cluster-node-timeout", "1000").
func ClusterWithReplicas(t testing.TB, extra ...string) *ReplicatedCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("testenv: redis-cli not found; install it: apt-get install -y redis-tools")
	}
	c := &ReplicatedCluster{}
	var addrs []string
	for range 6 {
		dir := t.TempDir()
		s := StartServer(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000", "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
			"--enable-debug-command", "yes"}, extra...)...)
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

// Addrs are every node's address (FLASHSALE_REDIS_ADDRS).
func (c *ReplicatedCluster) Addrs() []string {
	var out []string
	for _, s := range c.Nodes {
		out = append(out, s.Addr)
	}
	return out
}

// Client is a cluster client of the nodes, closed when the test ends.
func (c *ReplicatedCluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: 10, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// MasterOf is the node that serves key's slot now, as a fresh cluster client learns it (nil
// while it cannot tell).
func (c *ReplicatedCluster) MasterOf(key string) *Server {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: 10, ReadTimeout: 10 * time.Second})
	defer cc.Close()
	m, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		return nil
	}
	for _, s := range c.Nodes {
		if s.Addr == m.Options().Addr {
			return s
		}
	}
	return nil
}

// Healthy reports whether every node runs and says the cluster is ok, and there are three
// masters, each with a replica in step.
func (c *ReplicatedCluster) Healthy() bool {
	return clusterHealthy(c.Nodes, 1)
}

// clusterHealthy reports whether every node runs and says the cluster is ok, and there are
// three masters, each with replicas online whose links are up.
func clusterHealthy(nodes []*Server, replicas int) bool {
	masters := 0
	for _, s := range nodes {
		if !s.Running() || s.ClusterInfo("cluster_state") != "ok" {
			return false
		}
		switch s.Info("replication", "role") {
		case "master":
			if s.Info("replication", "connected_slaves") != strconv.Itoa(replicas) {
				return false
			}
			masters++
		case "slave":
			if s.Info("replication", "master_link_status") != "up" {
				return false
			}
		default:
			return false
		}
	}
	return masters == 3
}

// AckClient is a client of the primary whose state changes are answered only once n replicas
// hold them (FLASHSALE_REDIS_ACK_REPLICAS, waiting up to timeout); closed when the test ends.
func (r *Replicated) AckClient(t testing.TB, n int, timeout time.Duration) redis.UniversalClient {
	t.Helper()
	rdb, err := redisconn.OpenWith(context.Background(), redisconn.Options{Addrs: []string{r.Primary.Addr}, AckReplicas: n, AckTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
