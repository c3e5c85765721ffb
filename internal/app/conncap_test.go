package app_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/app"
)

// The caps, over real TCP from several loopback addresses: an address is refused at its
// per-client cap; in the total's last eighth only addresses holding fewer than 8 get in; at the
// total nobody does; a trusted proxy counts in the total only; a closed connection frees its
// place. Refusals are closed at once (the client reads EOF) and counted.
func TestCappedListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := netip.MustParseAddr("127.0.9.9")
	capped := app.CapConns(ln, app.ConnCaps{Max: 32, PerClient: 10,
		Trusted: func(a netip.Addr) bool { return a == proxy }})
	defer capped.Close()
	accepted := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := capped.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients, servers []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	// dial connects from ip and reports whether the listener kept the connection: a kept one
	// is handed to the server (accepted); a refused one is closed (the client reads EOF).
	dial := func(ip string) bool {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		done := make(chan bool, 1)
		go func() {
			var b [1]byte
			_, err := c.Read(b[:])
			done <- err == nil
		}()
		select {
		case s := <-accepted:
			clients = append(clients, s)
			servers = append(servers, s)
			c.Close() // ends the read
			return true
		case <-done:
			return false
		}
	}
	for i := range 10 {
		if !dial("127.0.1.1") {
			t.Fatalf("connection %d of 127.0.1.1 refused under its cap", i+1)
		}
	}
	if dial("127.0.1.1") {
		t.Fatal("the 11th connection of one address was kept (per-client cap 10)")
	}
	for i := range 12 { // the proxy: past the per-client cap, 22 held in all
		if !dial("127.0.9.9") {
			t.Fatalf("connection %d of the trusted proxy refused", i+1)
		}
	}
	for i := range 6 { // 28 = 32 less its eighth: heavy addresses stop here
		if !dial("127.0.1.2") {
			t.Fatalf("connection %d of 127.0.1.2 refused", i+1)
		}
	}
	if dial("127.0.1.1") || dial("127.0.9.9") {
		t.Fatal("an address holding 8 or more got into the reserve")
	}
	for i := range 4 { // the reserve, for addresses holding fewer than 8
		if !dial("127.0.1." + string(rune('3'+i))) {
			t.Fatalf("a light address was refused the reserve (%d)", i)
		}
	}
	if dial("127.0.1.7") {
		t.Fatal("a 33rd connection was kept (total cap 32)")
	}
	open, total, perClient := capped.Counts()
	if open != 32 || total != 3 || perClient != 1 {
		t.Fatalf("counts: open %d, refused total %d per-client %d; want 32, 3, 1", open, total, perClient)
	}
	servers[len(servers)-1].Close() // the server closes one: its place is free at once
	if !dial("127.0.1.7") {
		t.Fatal("a place given back was not reused")
	}
}
