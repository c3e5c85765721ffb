package redisconn

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// A Redis that requires a password (an ACL user too) is reached with Security's login, and
// refused without it.
func TestLoginToARedisThatRequiresIt(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
		"--appendonly", "no", "--requirepass", "default-pass", "--user", "shop", "on", ">shop-pass", "~*", "+@all")
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v (install it: apt-get install redis-server)", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := []string{"127.0.0.1:" + strconv.Itoa(port)}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr[0])
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, sec := range []Security{{Password: "default-pass"}, {Username: "shop", Password: "shop-pass"}} {
		rdb, err := OpenSecure(ctx, addr, 0, sec)
		if err != nil {
			t.Fatalf("login as %q: %v", sec.Username, err)
		}
		rdb.Close()
	}
	for _, sec := range []Security{{}, {Password: "wrong"}, {Username: "shop", Password: "default-pass"}} {
		if rdb, err := OpenSecure(ctx, addr, 0, sec); err == nil {
			rdb.Close()
			t.Fatalf("login %+v accepted", sec)
		}
	}
}
