package app

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// ConnCaps bound what a listener holds: a connection is a file descriptor, and an api out of
// descriptors accepts nothing, /healthz included.
type ConnCaps struct {
	// Max is the connections held in all. Its last eighth is kept for addresses holding fewer
	// than ReserveFew, so a flood from a few addresses leaves room for everyone else (health
	// checks, operators, shoppers).
	Max int
	// PerClient is the connections one client address may hold; 0: no such cap.
	PerClient int
	// Trusted reports a peer that carries many clients (a proxy of FLASHSALE_TRUSTED_PROXIES):
	// it counts in the total only.
	Trusted func(netip.Addr) bool
}

// ReserveFew is how few connections an address must hold to use the total's reserved eighth.
const ReserveFew = 8

// Open is where a connection over a cap can be told apart: the most a listener lets heavy
// addresses hold (Max less the reserve).
func (c ConnCaps) Open() int { return c.Max - c.Max/8 }

// CappedListener accepts connections within its caps and closes the others at once, without
// reading from them (never queued: a flood costs a descriptor for a moment, not a goroutine).
type CappedListener struct {
	net.Listener
	caps ConnCaps

	mu     sync.Mutex
	open   int
	byAddr map[netip.Addr]int

	refusedTotal, refusedPerClient atomic.Int64
}

// CapConns wraps ln.
func CapConns(ln net.Listener, caps ConnCaps) *CappedListener {
	return &CappedListener{Listener: ln, caps: caps, byAddr: map[netip.Addr]int{}}
}

// Accept returns the next connection within the caps.
func (l *CappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := remoteAddr(c)
		if l.admit(addr) {
			return &cappedConn{Conn: c, l: l, addr: addr}, nil
		}
		_ = c.Close()
	}
}

// admit counts a new connection from addr in, or the refusal.
func (l *CappedListener) admit(addr netip.Addr) bool {
	trusted := l.caps.Trusted != nil && l.caps.Trusted(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.byAddr[addr]
	switch {
	case l.open >= l.caps.Max || (l.open >= l.caps.Open() && held >= ReserveFew):
		l.refusedTotal.Add(1)
		return false
	case !trusted && l.caps.PerClient > 0 && held >= l.caps.PerClient:
		l.refusedPerClient.Add(1)
		return false
	}
	l.open++
	l.byAddr[addr] = held + 1
	return true
}

func (l *CappedListener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if n := l.byAddr[addr] - 1; n > 0 {
		l.byAddr[addr] = n
	} else {
		delete(l.byAddr, addr)
	}
}

// Counts are the connections held now and those refused so far by the total (its reserve
// included) and by the per-client cap.
func (l *CappedListener) Counts() (open int, refusedTotal, refusedPerClient int64) {
	l.mu.Lock()
	open = l.open
	l.mu.Unlock()
	return open, l.refusedTotal.Load(), l.refusedPerClient.Load()
}

func remoteAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// cappedConn gives its place back once, at its first Close (the server's, or a stream's
// after a hijack).
type cappedConn struct {
	net.Conn
	l      *CappedListener
	addr   netip.Addr
	closed atomic.Bool
}

func (c *cappedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.addr)
	}
	return c.Conn.Close()
}
