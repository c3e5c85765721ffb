package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A network partition on loopback. Each server of a Split connects from a loopback address of its
// own (bind-source-addr 127.0.0.x) and is reached through a TCP proxy of its own, which knows
// who connects by the source address: a partition cuts links between groups, not whole nodes
// (the api may keep reaching the primary while the Sentinels do not).

// Group names the processes behind one source address.
type Group string

// APIGroup is every process connecting from 127.0.0.1: the api and the reconciler.
const APIGroup Group = "api"

// Link is one TCP proxy in front of a server.
type Link struct {
	Listen   string // what everyone dials
	upstream string
	to       Group // the group of the server behind it
	net      *Net
	ln       net.Listener
}

// Net is the proxies of a Split and the cuts between groups.
type Net struct {
	mu     sync.Mutex
	cond   *sync.Cond
	cut    map[[2]Group]bool // {from, to}: connections from to the server of to do not pass
	groups map[string]Group  // source IP -> group
}

func newNet() *Net {
	n := &Net{cut: map[[2]Group]bool{}, groups: map[string]Group{"127.0.0.1": APIGroup}}
	n.cond = sync.NewCond(&n.mu)
	return n
}

// Cut cuts every link between a group of side and a group of other, both ways.
func (n *Net) Cut(side, other []Group) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range side {
		for _, b := range other {
			n.cut[[2]Group{a, b}] = true
			n.cut[[2]Group{b, a}] = true
		}
	}
}

// Heal removes every cut.
func (n *Net) Heal() {
	n.mu.Lock()
	n.cut = map[[2]Group]bool{}
	n.mu.Unlock()
	n.cond.Broadcast()
}

// open waits until the link from from to to is not cut (or done is closed).
func (n *Net) open(from, to Group, done <-chan struct{}) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.cut[[2]Group{from, to}] {
		select {
		case <-done:
			return false
		default:
		}
		n.cond.Wait()
	}
	return true
}

func (n *Net) group(addr net.Addr) Group {
	host, _, _ := net.SplitHostPort(addr.String())
	n.mu.Lock()
	defer n.mu.Unlock()
	if g, ok := n.groups[host]; ok {
		return g
	}
	return Group("unknown " + host)
}

// proxy starts a Link to upstream (a server of group to) until the test ends.
func (n *Net) proxy(t testing.TB, upstream string, to Group) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{Listen: ln.Addr().String(), upstream: upstream, to: to, net: n, ln: ln}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(done)
		ln.Close()
		n.cond.Broadcast()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.serve(c, done)
			}()
		}
	}()
	return l
}

// serve carries one connection, holding it while its link is cut: no bytes either way (they
// wait, as TCP retransmits through a partition), and a new connection is accepted but not
// connected until the cut heals. Tests' own probes dial the real addresses, never cut.
func (l *Link) serve(c net.Conn, done <-chan struct{}) {
	defer c.Close()
	from := l.net.group(c.RemoteAddr())
	if !l.net.open(from, l.to, done) {
		return
	}
	up, err := net.DialTimeout("tcp", l.upstream, 2*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	stop := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-stop:
		}
		c.Close()
		up.Close()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	carry := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			k, err := src.Read(buf)
			if k > 0 {
				if !l.net.open(from, l.to, done) {
					break
				}
				if _, werr := dst.Write(buf[:k]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		// One side ended: end both (a half-closed Redis connection is of no use).
		c.Close()
		up.Close()
	}
	go carry(up, c)
	go carry(c, up)
	wg.Wait()
	close(stop)
}

// Split is a primary, its replicas and three Sentinels (quorum 2, down-after 3 s) whose links
// can be cut (Net). Groups: "A" (the first primary), "B", "C", ... (the replicas) and
// "sentinels" (all three: they stay together in every partition); the api's group is
// APIGroup.
type Split struct {
	*Replicated
	Net           *Net
	links         map[string]*Link // by real address
	groupOf       map[string]Group // by real address
	SentinelAddrs []string         // what the api is given: the Sentinels' proxies
}

// SentinelsGroup is the Sentinels' group.
const SentinelsGroup Group = "sentinels"

// SplitRedis starts a primary and n replicas behind proxies, and three Sentinels, and waits
// until every Sentinel knows every replica and the other Sentinels. extra are more
// redis-server arguments for the data servers.
func SplitRedis(t testing.TB, n int, extra ...string) *Split {
	t.Helper()
	s := &Split{Net: newNet(), links: map[string]*Link{}, groupOf: map[string]Group{},
		Replicated: &Replicated{MasterName: "mymaster"}}
	base := append([]string{"--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--protected-mode", "no",
		"--enable-debug-command", "yes", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
		"--replica-announce-ip", "127.0.0.1"}, extra...)
	// Each server listens on a port known before it starts (its proxy's address is what it
	// announces, so the proxy comes first).
	start := func(i int, replicaOf string) *Server {
		g := Group(string(rune('A' + i)))
		src := "127.0.0." + strconv.Itoa(2+i)
		port := freePort(t)
		direct := "127.0.0.1:" + strconv.Itoa(port)
		s.Net.mu.Lock()
		s.Net.groups[src] = g
		s.Net.mu.Unlock()
		link := s.Net.proxy(t, direct, g)
		_, lport := hostPort(link.Listen)
		args := append(slices.Clone(base), "--bind-source-addr", src, "--replica-announce-port", lport)
		if replicaOf != "" {
			h, p := hostPort(replicaOf)
			args = append(args, "--replicaof", h, p)
		}
		srv := startServerOn(t, port, args...)
		s.links[srv.Addr] = link
		s.groupOf[srv.Addr] = g
		return srv
	}
	s.Primary = start(0, "")
	for i := range n {
		s.Replicas = append(s.Replicas, start(i+1, s.links[s.Primary.Addr].Listen))
	}
	s.WaitInSync(t, s.Primary, n)

	s.Net.mu.Lock()
	s.Net.groups["127.0.0.50"] = SentinelsGroup
	s.Net.mu.Unlock()
	mh, mp := hostPort(s.links[s.Primary.Addr].Listen)
	for range 3 {
		dir := t.TempDir()
		port := freePort(t)
		direct := "127.0.0.1:" + strconv.Itoa(port)
		link := s.Net.proxy(t, direct, SentinelsGroup)
		_, lport := hostPort(link.Listen)
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\nlogfile %s\n"+
			"bind-source-addr 127.0.0.50\nsentinel announce-ip 127.0.0.1\nsentinel announce-port %s\n"+
			"sentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %s 3000\n"+
			"sentinel failover-timeout %s 3000\n"+
			"sentinel parallel-syncs %s 1\n",
			port, dir, filepath.Join(dir, "sentinel.log"), lport, s.MasterName, mh, mp,
			s.MasterName, s.MasterName, s.MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		srv := &Server{Addr: direct, Dir: dir, t: t, args: []string{conf, "--sentinel"}}
		srv.cleanup()
		srv.Start()
		s.links[srv.Addr] = link
		s.groupOf[srv.Addr] = SentinelsGroup
		s.Sentinels = append(s.Sentinels, srv)
		s.SentinelAddrs = append(s.SentinelAddrs, link.Listen)
	}
	for _, srv := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
		WaitFor(t, "Sentinel "+srv.Addr+" knows the replicas and the other Sentinels", 30*time.Second, func() bool {
			ctx := context.Background()
			reps, err := sc.Replicas(ctx, s.MasterName).Result()
			if err != nil || len(reps) < n {
				return false
			}
			for _, rep := range reps {
				if rep["flags"] != "slave" || rep["master-link-status"] != "ok" {
					return false
				}
			}
			others, err := sc.Sentinels(ctx, s.MasterName).Result()
			return err == nil && len(others) >= 2
		})
		sc.Close()
	}
	return s
}

// Group is the group of the server at its real address addr.
func (s *Split) Group(srv *Server) Group { return s.groupOf[srv.Addr] }

// Announced is the address everyone dials for srv (its proxy).
func (s *Split) Announced(srv *Server) string { return s.links[srv.Addr].Listen }

// SentinelPrimary is the server every Sentinel names primary (nil while they disagree or one
// does not answer).
func (s *Split) SentinelPrimary() *Server {
	announced := s.Replicated.SentinelPrimary()
	for addr, l := range s.links {
		if l.Listen == announced {
			return s.Server(addr)
		}
	}
	return nil
}

// ListedDown reports whether every Sentinel lists the replica srv subjectively down (s_down:
// silent for their down-after time), the state in which they no longer promote it.
func (s *Split) ListedDown(srv *Server) bool {
	name := s.Announced(srv)
	for _, sen := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr, MaxRetries: -1, DialTimeout: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		reps, err := sc.Replicas(ctx, s.MasterName).Result()
		cancel()
		sc.Close()
		if err != nil {
			return false
		}
		down := false
		for _, r := range reps {
			if r["name"] == name && slices.Contains(strings.Split(r["flags"], ","), "s_down") {
				down = true
			}
		}
		if !down {
			return false
		}
	}
	return true
}

// WaitReplicated waits up to d until the Sentinels agree on a primary that has every other
// data server online as its replica, in step, and makes it s.Primary.
func (s *Split) WaitReplicated(t testing.TB, d time.Duration) {
	t.Helper()
	WaitFor(t, "the Sentinels' primary to have every other server as its replica, in step", d, func() bool {
		p := s.SentinelPrimary()
		others, ok := inStepUnder(p, append([]*Server{s.Primary}, s.Replicas...))
		if ok {
			s.Primary, s.Replicas = p, others
		}
		return ok
	})
}

// Client is a client of whichever server the Sentinels name primary, dialing the servers' real
// addresses (never cut), for a test's checks; closed when the test ends.
func (s *Split) Client(t testing.TB) *redis.Client {
	direct := map[string]string{}
	var sentinels []string
	for addr, l := range s.links {
		direct[l.Listen] = addr
	}
	for _, srv := range s.Sentinels {
		sentinels = append(sentinels, srv.Addr)
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: sentinels,
		MaxRetries: 5, ReadTimeout: 10 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if r, ok := direct[addr]; ok {
				addr = r
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { c.Close() })
	return c
}

// SplitCluster is a Redis Cluster of three masters with two replicas each whose links can be
// cut: every node makes its connections from a loopback address of its own (group "n0".."n8")
// and is reached through a proxy for its client port and one for its cluster bus port (what it
// announces), with a 1 s node timeout.
type SplitCluster struct {
	Net     *Net
	Nodes   []*Server
	Addrs   []string         // the nodes' announced client addresses (FLASHSALE_REDIS_ADDRS)
	links   map[string]*Link // client-port proxy by real address
	groupOf map[string]Group // by real address
}

// SplitClusterRedis starts the nodes, creates the cluster (redis-cli --cluster create
// --cluster-replicas 2) and waits until every node says ok and every master has its two
// replicas in step. extra are more redis-server arguments for every node.
func SplitClusterRedis(t testing.TB, extra ...string) *SplitCluster {
	t.Helper()
	c := &SplitCluster{Net: newNet(), links: map[string]*Link{}, groupOf: map[string]Group{}}
	for i := range 9 {
		g := Group("n" + strconv.Itoa(i))
		src := "127.0.0." + strconv.Itoa(10+i)
		c.Net.mu.Lock()
		c.Net.groups[src] = g
		c.Net.mu.Unlock()
		port, bus := freePort(t), freePort(t)
		direct := "127.0.0.1:" + strconv.Itoa(port)
		link := c.Net.proxy(t, direct, g)
		blink := c.Net.proxy(t, "127.0.0.1:"+strconv.Itoa(bus), g)
		_, lport := hostPort(link.Listen)
		_, bport := hostPort(blink.Listen)
		dir := t.TempDir()
		args := append([]string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "1000", "--cluster-port", strconv.Itoa(bus),
			"--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", lport, "--cluster-announce-bus-port", bport,
			"--bind-source-addr", src, "--protected-mode", "no",
			"--replica-announce-ip", "127.0.0.1", "--replica-announce-port", lport,
			"--save", "", "--appendonly", "yes", "--appendfsync", "everysec"}, extra...)
		s := startServerOn(t, port, args...)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, link.Listen)
		c.links[s.Addr] = link
		c.groupOf[s.Addr] = g
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "2", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	WaitFor(t, "the cluster ok, each master with two replicas in step", 90*time.Second, c.Healthy)
	return c
}

// Group is the group of node s.
func (c *SplitCluster) Group(s *Server) Group { return c.groupOf[s.Addr] }

// Node is the node whose real or announced address is addr (nil: none).
func (c *SplitCluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr || c.links[s.Addr].Listen == addr {
			return s
		}
	}
	return nil
}

// Client is a cluster client dialing the nodes' real addresses (never cut), for a test's
// checks; closed when the test ends.
func (c *SplitCluster) Client(t testing.TB) *redis.ClusterClient {
	cc := c.client()
	t.Cleanup(func() { cc.Close() })
	return cc
}

func (c *SplitCluster) client() *redis.ClusterClient {
	direct := map[string]string{}
	for addr, l := range c.links {
		direct[l.Listen] = addr
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRetries: 10, ReadTimeout: 10 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if r, ok := direct[addr]; ok {
				addr = r
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
}

// MasterOf is the node that serves key's slot as the node at from (a real address) sees it
// now: a probe that is never cut (nil while it cannot tell).
func (c *SplitCluster) MasterOf(from *Server, key string) *Server {
	cl := redis.NewClient(&redis.Options{Addr: from.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil
	}
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return nil
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return c.Node(net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)))
				}
			}
		}
	}
	return nil
}

// ReplicasOf are the nodes that replicate master, as master says (INFO replication).
func (c *SplitCluster) ReplicasOf(master *Server) []*Server {
	var out []*Server
	info := master.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := info.Info(ctx, "replication").Result()
	if err != nil {
		return nil
	}
	for _, a := range connectedAnnounced(s) {
		if n := c.Node(a); n != nil {
			out = append(out, n)
		}
	}
	return out
}

// connectedAnnounced lists the ip:port of INFO replication's replicas.
func connectedAnnounced(info string) []string {
	var out []string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, ":ip=") {
			continue
		}
		_, attrs, _ := strings.Cut(line, ":")
		var ip, port string
		for _, kv := range strings.Split(attrs, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		out = append(out, net.JoinHostPort(ip, port))
	}
	return out
}

// Healthy reports whether every node runs and says the cluster is ok, and there are three
// masters, each with two replicas online whose links are up.
func (c *SplitCluster) Healthy() bool {
	return clusterHealthy(c.Nodes, 2)
}
