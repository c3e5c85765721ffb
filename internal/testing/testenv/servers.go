package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/redisconn"
)

func freePort(t testing.TB) int {
	t.Helper()
	return FreePort(t)
}

// Ports handed out by FreePort come from below the kernel's ephemeral range, at random and once
// per process: a port from :0 may be taken as the local port of an outgoing connection before
// the server binds it. The port 10000 above each is kept free too (a cluster node's bus port).
const (
	portLow, portHigh = 10000, 20000
	busOffset         = 10000
)

var givenPorts sync.Map // int -> struct{}

// FreePort returns a TCP port on 127.0.0.1 that is free now, never handed out before in this
// process, and outside the ephemeral range (as is the port 10000 above it, a cluster node's
// default bus port), for a server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 1000 {
		p := portLow + rand.IntN(portHigh-portLow)
		if _, taken := givenPorts.LoadOrStore(p, struct{}{}); taken {
			continue
		}
		if free(p) && free(p+busOffset) {
			return p
		}
	}
	t.Fatalf("testenv: no free port in %d-%d", portLow, portHigh)
	return 0
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func redisServerBinary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server not found; install it: apt-get install -y redis-server")
	}
	return p
}

// startRedisServer runs a private redis-server with extra arguments; it is shut down when the
// test ends. It returns the address.
func startRedisServer(t testing.TB, dir string, extra ...string) string {
	t.Helper()
	// freePort's port is free only until someone else binds it: a parallel test's listener on
	// port 0 can take it before redis-server starts, and a dial would then reach that listener.
	// So a start counts only once the answering server reports this child's pid; a child that
	// exited (its port taken) is started again on another port.
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
			"--appendonly", "no", "--dir", dir, "--daemonize", "no", "--logfile", ""}, extra...)
		cmd := exec.Command(redisServerBinary(t), args...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("testenv: start redis-server: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if ownServerAnswers(addr, cmd.Process.Pid, exited) {
			return addr
		}
		select {
		case <-exited:
			if attempt < 5 {
				continue // its port was taken in the meantime
			}
			t.Fatalf("testenv: redis-server exited at start %d times (ports taken?)", attempt)
		default:
			t.Fatalf("testenv: redis-server on %s did not start within 10 s", addr)
		}
	}
}

// ownServerAnswers waits up to 10 s for the redis-server with this pid to answer on addr; it
// gives up early when that process exits.
func ownServerAnswers(addr string, pid int, exited <-chan struct{}) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	want := "process_id:" + strconv.Itoa(pid)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil && strings.Contains(info, want+"\r\n") {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// PrivateRedis starts a redis-server of the test's own (for tests that restart it, stall it or
// flush its script cache, which must not disturb the shared server); extra are more
// redis-server arguments (e.g. "--enable-debug-command", "yes" for DEBUG SLEEP).
func PrivateRedis(t testing.TB, extra ...string) (redis.UniversalClient, keyspace.Space, string) {
	t.Helper()
	addr := startRedisServer(t, t.TempDir(), extra...)
	rdb, err := redisconn.Open(context.Background(), []string{addr}, 0)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { rdb.Close() })
	if err := exactlyonce.Load(context.Background(), rdb); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return rdb, keyspace.Space{Prefix: "t" + Token(4) + ":"}, addr
}

// Cluster starts a local 3-master Redis Cluster (redis-server --cluster-enabled, joined
// with redis-cli --cluster create) and returns a cluster client and a key space.
func Cluster(t testing.TB) (redis.UniversalClient, keyspace.Space) {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("testenv: redis-cli not found; install it: apt-get install -y redis-tools")
	}
	var addrs []string
	for i := 0; i < 3; i++ {
		dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, startRedisServer(t, dir, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000"))
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		for {
			info, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.TrimPrefix(a, "127.0.0.1:"), "cluster", "info").Output()
			if strings.Contains(string(info), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testenv: cluster did not become ok: %s", info)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	rdb, err := redisconn.Open(context.Background(), addrs, 0)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { rdb.Close() })
	// Every master must have the scripts: ScriptLoad on a cluster client goes to all of them.
	if err := exactlyonce.Load(context.Background(), rdb); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return rdb, keyspace.Space{Prefix: "t" + Token(4) + ":"}
}
